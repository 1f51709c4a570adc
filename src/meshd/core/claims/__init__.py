"""Claims (SPEC §5, §5b): the lock table (:mod:`~meshd.core.claims.table`) and its parts."""
