"""Devfleet: real local control planes (one etcd, N kube-apiservers) for tests and demos.

binaries (build + cache) -> controlplane (processes, certs, kubeconfigs) -> provision (CRDs,
GPU Nodes) -> devfleet (the whole thing as one call).
"""
