"""Control: the async loop that dispatches hub workloads, mirrors status, deletes and fails over.

The path of one hub workload through these modules, and where each rule lives, is
docs/architecture.md; here each module by its job.

Pure cores (no I/O, no clock read): ``decide`` (one workload's next action, a documented
branch table), ``placing`` (placing one workload over read-only views of the queue and the
fleet: parking, adoption, the gate, the reservation to take; ``placing.place_ask``, on plain
data, is the one place function of the controller, ``dispatcher explain`` and ``dispatcher
simulate``), ``parking`` (invalid or never-placeable
workloads are parked, not queued), ``queue`` (the pending order: priority, turns across
namespaces, age; backfill bounded per namespace), ``priority`` (the annotation capped per
namespace), ``podpolicy`` (the scheduling fields a tenant's pod template may set),
``record`` (the Dispatch object as a value, the body it is created with, its status
patches), ``pending`` (when a waiting workload's reason is written again: when what it
means changes, its numbers at most every ``queue.pendingRefresh``), ``orphans`` (which of
our copies the sweep deletes), ``gangsched`` (what a copy
carries so the member binds each gang all or nothing), ``copyplan`` (the member copy as a
plan: its body, gang objects, pods to dry-run and namespace, or why none may be
written), ``hubstatus`` (the hub status the mirror writes), ``hubhold`` (the shared
hub's admission decision), ``dryrun`` (the Pods a copy's templates are dry-run as on a
member, and the acceptances remembered; ``podadmission`` sends them),
``topology`` (the required node affinity that keeps a copy's gangs in the topology domains
placement chose),
``overview``/``recent`` (the fleet view's rows, the last decisions), ``names`` (labels,
annotations, finalizer, phases, pending reasons), ``settings`` (the control loop's part of
the config).

Shell: ``watchers`` (hub kinds, Dispatches, member copies -> ``caches`` + kicks; a copy's
status read through the current catalog by ``readings``), ``workers`` (one serial worker per
workload uid), ``reconcile`` (snapshot -> decide -> execute; ``resolutions`` resolves each
workload once per generation before it is placed; ``memory`` holds what the last steps saw
that the hub does not say: the version last mirrored, foreign sightings, a member's
refusal), ``planner`` (gathers a copy plan's input between decide and the write, and runs
it where the definition may run), ``actions`` (the writes of each action, through the two
ports of ``writer``: ``writes`` on the hub and ``submit`` on the members, which only
sends a plan and maps the answers; with ``copies`` for what a
copy carries and whose a member object is, and
``namespaces`` for the member namespace, never weaker than the hub's, and ``gangwrites``
for the gang objects created with a copy), ``controller``
(wiring, queue rounds, reservation expiry, orphan sweep), ``catalog`` (the swappable live
catalog) fed by ``definitions`` (hub definition objects and their status), ``leader``
(Lease election), ``events`` (Kubernetes Events), ``observe`` (logs, metrics, health
server) and ``meters`` (gauges read at scrape), ``fleetview`` (the fleet seam).

The controller process and explain's live view are assembled above this package, in
``shell.app`` and ``shell.live``.
"""
