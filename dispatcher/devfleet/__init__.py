"""Devfleet: real local control planes (one etcd, N kube-apiservers) for tests and demos."""
