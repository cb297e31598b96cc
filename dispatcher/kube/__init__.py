"""Kube: thin async Kubernetes access over kubernetes_asyncio.

``client`` (one authenticated connection per cluster, JSON requests, watch streams),
``resources`` (kind -> URL through discovery), ``watch`` (list-then-watch with re-list on
410), ``errors`` (the error hierarchy). The only package that imports kubernetes_asyncio.
"""
