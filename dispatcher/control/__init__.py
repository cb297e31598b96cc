"""Control: the async loop that dispatches hub workloads, mirrors status, deletes and fails over.

The path of one hub workload through these modules, and where each rule lives, is
docs/architecture.md; here each module by its job.

``core`` holds the pure core (no I/O, no clock read): decide, placing, queue, the record,
the copy and its plan and the other decisions, each listed in its docstring; it never
imports the shell below. Pure, but here because they are the shell's own views:
``overview``/``recent`` (the fleet view's rows, the last decisions), ``settings`` (the
control loop's part of the config).

Shell: ``watchers`` (hub kinds, Dispatches, member copies -> ``caches`` + kicks; a copy's
status read through the current catalog by ``readings``), ``workers`` (one serial worker per
workload uid), ``reconcile`` (snapshot -> decide -> execute; ``resolutions`` resolves each
workload once per generation before it is placed; ``memory`` holds what the last steps saw
that the hub does not say: the version last mirrored, foreign sightings, a member's
refusal), ``planner`` (gathers a copy plan's input between decide and the write, and runs
it where the definition may run), ``actions`` (the writes of each action, through the two
ports of ``writer``: ``writes`` on the hub and ``submit`` on the members, which only
sends a plan and maps the answers; with ``podadmission`` for the dry-run requests,
``namespaces`` for the member namespace, never weaker than the hub's, and ``gangwrites``
for the gang objects created with a copy), ``controller``
(wiring, queue rounds, reservation expiry, orphan sweep), ``catalog`` (the swappable live
catalog) fed by ``definitions`` (hub definition objects and their status), ``leader``
(Lease election), ``events`` (Kubernetes Events), ``observe`` (logs, metrics, health
server) and ``meters`` (gauges read at scrape), ``fleetview`` (the fleet seam).
``nominator`` replaces the dispatch path with ``mode: multikueue-dispatcher``: it watches
the hub's Kueue Workloads and nominates the worker MultiKueue copies each to.

The controller process and explain's live view are assembled above this package, in
``shell.app`` and ``shell.live``.
"""
