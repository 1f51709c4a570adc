"""Shared work (SPEC §5b, §7): board, marks, notes, signals, ledger, jobs and preemption."""
