"""Control: the async loop that dispatches hub workloads, mirrors status, deletes and fails over.

Pure cores (no I/O, no clock): ``decide`` (one workload's next action, a documented branch
table), ``record`` (the Dispatch object as a value and its status patches), ``queue``
(priority, turns across namespaces, age; backfill bounded per namespace), ``priority``
(the annotation capped per namespace), ``admission`` (invalid or never-placeable workloads
are parked, not queued), ``names`` (labels, annotations, phases).

Shell: ``watchers`` (hub kinds, Dispatches, member copies -> caches + kicks), ``workers``
(one serial worker per workload uid), ``reconcile``/``actions`` (snapshot -> decide ->
execute), ``copies`` (stamping and delete-if-owned), ``controller`` (wiring, queue rounds,
reservation expiry, orphan sweep), ``leader`` (Lease election), ``events`` (Kubernetes
Events), ``observe`` (logs, metrics, health server), ``fleetview`` (the fleet seam),
``live`` (the controller's fleet view for one-shot commands), ``app`` (``dispatcher run``).
"""
