"""Sim: an in-memory fleet and a virtual clock for ``dispatcher simulate``.

Runs the real resolve, placement and queue cores; only clusters and time are simulated.
"""
