"""Files that outlive a run: baseline files, the results history, replay of stored numbers."""
