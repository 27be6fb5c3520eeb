"""The whole system under faults: real SIGKILLs, several nodes, the nemesis, the deterministic simulation."""
