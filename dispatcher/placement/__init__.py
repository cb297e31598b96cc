"""Placement: which member can run every pod of every gang now, and which is best.

Pure: a function of a ``Demand`` and member snapshots (``fleet.capacity.ClusterCapacity``
with reservations applied). Fed by ``workloads`` and ``fleet``, feeds ``control``.

- ``model``: the boundary values (``MemberSnapshot``, ``PlacementRequest``, ``Verdict``,
  ``Decision``, ``NodeGrant``, ``PlacementError``);
- ``selector``: Kubernetes label selector strings (``dispatcher.io/cluster-selector``);
- ``fit``: gang fit at node granularity (best-fit decreasing over node classes bucketed by
  free GPUs), explicit node assignments, numeric misfit reasons, fit counts;
- ``domains``: each gang inside one topology domain (rack, NVLink clique) of the member's
  levels, with the domain's numbers when none holds it;
- ``engine``: ``decide``: gates, fit, policies (``most-free``, ``best-fit``), choice,
  one-line summary.
"""
