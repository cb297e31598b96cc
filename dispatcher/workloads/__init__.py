"""Workloads: what a hub object needs, read through its declarative definition.

No Kubernetes I/O. Feeds ``fleet``/``placement`` with a ``Demand``. Pure but for the
bounded evaluation of untrusted definitions (worker processes, a CPU-aware deadline).

Modules, in data-flow order:

- loading: ``definitions`` (files) and ``reader`` (one document into a ``Definition`` of
  ``model``, on ``recorder``, ``statusdef``, ``gangdef`` (gang scheduling) and
  ``copydef`` (``copyDefinition``); ``pathshape`` checks a ``serverSetPaths``
  entry is a path, ``holds`` reads ``copyDefinition.hubHold``); ``catalog`` (definitions by
  kind) and ``hubdefinitions`` (the hub's definition objects linted and merged with the
  built-in and config-file ones, an ``Acceptance`` each)
- jq: ``jqcheck`` (what an expression may be, checked at load), ``jqrun`` (bounded, batched
  libjq, or ``jqlite`` in Python for the common subset: ``jqtokens``, ``jqnodes``,
  ``jqpaths``, ``jqvalues``); for untrusted definitions ``bounded`` (the ``Evaluator``) over
  ``jqpool`` (worker processes with rlimits), ``fairshare`` (whose turn, by namespace) and
  ``quarantine`` (who answers for a broken bound)
- resolving: ``resolve`` (object -> instances, pods, GPUs, ``gangs``, ``status``), on
  ``batchvalues`` (one batch's results as typed values) and ``instances`` (a component's
  instance ids and pod specs),
  ``podspec``/``quantity`` (one pod's needs), ``podfields`` (its scheduling fields),
  ``template`` (can a pod template be a Pod?), ``location`` (the JSON location of what a
  path names, for error messages), ``demand`` (the boundary types placement
  consumes), ``errors``; ``trace`` (the ``workload.resolved`` log line and its replay);
  ``statustrace`` (recorded status frames of one object, for ``inspect --status-trace``);
  ``kueueworkload`` (a hub Kueue Workload read for MultiKueue nomination, its pod sets as
  a ``Demand``)
- writing: ``paths`` (locations named by jq paths, removing them; a plain path is walked
  on the value by ``pathwalk``, which ``location`` uses too) and ``mutate`` (pod fields
  written back through a definition's paths), on ``plaincopy`` (a JSON value copied without
  copy.deepcopy)

Format: docs/definitions.md. Nothing heavy is imported here, so
``import dispatcher.workloads.demand`` stays cheap.
"""
