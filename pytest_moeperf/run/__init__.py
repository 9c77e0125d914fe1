"""The run: the servers and their scheduler, builds and models, the host watch,
the measuring sources, the session, and the one decision loop with what is built on it."""
