"""Workloads: what a hub object needs, read through its declarative definition.

Pure: no Kubernetes I/O, no clock. Feeds ``fleet``/``placement`` with a ``Demand``.

Modules, in data-flow order: ``definitions`` (load files) and ``reader`` (validate one
document into a ``model.Definition``, on ``recorder`` and ``statusdef``), ``jqrun``
(bounded, batched libjq), ``catalog`` (definitions by kind), ``resolve`` (object ->
instances, pods, GPUs, ``gangs``, ``status``), ``podspec``/``quantity`` (one pod's needs),
``mutate`` (write pod fields back), ``demand`` (the boundary types placement consumes),
``errors``. Format: docs/definitions.md.

Nothing heavy is imported here, so ``import dispatcher.workloads.demand`` stays cheap.
"""
