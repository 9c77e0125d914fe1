"""The machine: CPU lists, NUMA nodes, the host fingerprint, locks on the CPUs a measurement
uses."""
