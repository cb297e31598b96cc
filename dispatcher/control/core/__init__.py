"""The control loop's pure core: decisions as functions of plain data (no I/O, no clock read).

``decide`` (one workload's next action, a documented branch table), ``placing`` (placing one
workload over read-only views of the queue and the fleet: parking, adoption, the gate, the
reservation to take; ``placing.place_ask`` is the one place function of the controller,
``dispatcher explain`` and ``dispatcher simulate``), ``parking`` (invalid or never-placeable
workloads are parked, not queued), ``queue`` (the pending order: priority, turns across
namespaces, age; backfill bounded per namespace), ``priority`` (the annotation capped per
namespace), ``podpolicy`` (the scheduling fields a tenant's pod template may set), ``skew`` (pod
fields a member's Kubernetes minor would drop),
``record`` (the Dispatch object as a value, the body it is created with, its status
patches), ``pending`` (when a waiting workload's reason is written again), ``orphans``
(which of our copies the sweep deletes), ``copies`` (what a copy carries, whose a member
object is), ``copyplan`` (the member copy as a plan: body, gang objects, pods to dry-run,
namespace, or why none may be written), ``gangsched`` (what a copy carries so the member
binds each gang all or nothing), ``topology`` (the node affinity that keeps a copy's gangs
in the chosen domains), ``dryrun`` (the Pods a copy's templates are dry-run as, and the
acceptances remembered), ``hubstatus`` (the hub status the mirror writes), ``hubhold`` (the
shared hub's admission decision), ``nomination`` (which worker MultiKueue copies a hub
Workload to, as its external dispatcher), ``names`` (labels, annotations, finalizer,
phases, pending reasons).

Nothing here imports the shell around it (``dispatcher.control`` outside this package):
``tests/unit/test_layers.py`` enforces it.
"""
