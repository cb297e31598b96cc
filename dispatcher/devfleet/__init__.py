"""Devfleet: real local clusters (one etcd, a kube-apiserver per cluster; on real members also
kube-controller-manager, kube-scheduler and kwok) for tests and demos.

binaries (build + cache) -> controlplane (processes, certs, kubeconfigs, kwok stages) ->
provision (CRDs, GPU Nodes) -> devfleet (the whole thing as one call, light or real).
"""
