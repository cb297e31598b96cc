"""Devfleet: real local clusters (one etcd, a kube-apiserver per cluster; on real members also
kube-controller-manager, kube-scheduler, kwok and the workload operators; on the hub a
limited kube-controller-manager, or everything a real member runs with ``hub="shared"``) for
tests and demos.

binaries (build + cache) -> controlplane (processes, certs, kubeconfigs, kwok stages) ->
provision (CRDs, GPU Nodes) -> devfleet (the whole thing as one call, light or real, with a
dedicated or a shared hub).
"""
