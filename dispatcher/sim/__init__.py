"""Sim: ``dispatcher simulate``, the dispatcher's real cores on a simulated fleet in virtual time.

Only the clusters and the clock are simulated: workloads are resolved by the real workload
engine, each member is a real ``fleet.capacity.ClusterCapacity`` fed real Node and Pod
objects, every decision is the controller's own ``control.core.placing.place_ask`` (annotation
rules, the namespace gate, the placement engine, parking), and the queue is the
controller's ``control.core.queue.PendingQueue``.

Modules, in data-flow order:

- ``scenario``: the scenario file format (fleet, stream, policies, seed) and its validation,
  with ``quantities`` (durations and rates as written there: ``90s``, ``20/h``)
- ``stream``: scenario, or a controller log's ``workload.resolved`` lines
  (``workloads.trace``), -> resolved ``SimWorkload`` arrivals (seeded generator)
- ``engine``: the discrete-event loop (the controller's queue and ``placing.place_ask``, in
  virtual time, with its memo of failed shapes around it) -> ``RunResult``
- ``backend`` / ``cores``: the simulated fleet the loop uses (member views, bind, release),
  and its adapter to the real capacity model
- ``ledger``: an independent GPU ledger that raises on any over-allocation
- ``results``: per-policy figures (waits, utilization, fragmentation) as plain data
- ``runner``: one run of every policy; ``charts``: the PNGs of ``--report``
"""
