"""What to measure, declared: profiles and configurations from TOML, every key they take, the
moeperf.toml file ``moeperf init`` and ``moeperf tune`` write, and what a host lacks for them."""
