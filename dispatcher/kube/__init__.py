"""Kube: thin async Kubernetes access (kubernetes_asyncio): clients, CRUD, watch with re-list.

The only package that imports kubernetes_asyncio.
"""
