"""Control: the async loop that dispatches hub workloads, mirrors status, deletes and fails over.

Decisions are pure functions of snapshots; this package's shell executes them.
"""
