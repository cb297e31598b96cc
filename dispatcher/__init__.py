"""dispatcher: dispatch GPU workloads of any type across Kubernetes clusters.

Data flows through the subpackages in this order: ``workloads`` (what a workload needs),
``fleet`` (what each member cluster has), ``placement`` (where it fits best), ``control``
(the async loop that acts on the hub and the members). ``kube`` is the thin Kubernetes I/O
layer below them; ``sim`` and ``devfleet`` serve simulation and local control planes.
"""

__version__ = "0.1.0"
