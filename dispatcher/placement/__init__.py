"""Placement: which member can run every pod of every gang now, and which is best.

Pure: a function of a ``Demand`` and capacity snapshots. Fed by ``workloads`` and ``fleet``,
feeds ``control``.
"""
