"""Sessions (SPEC §4): the live registry, its records, and the indexes beside it."""
