"""Workloads: what a hub object needs, read through its declarative definition.

Pure: no Kubernetes I/O, no clock. Feeds ``fleet``/``placement`` with a ``Demand``.
"""
