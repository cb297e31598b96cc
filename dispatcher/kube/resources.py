"""Resource addressing: apiVersion + kind -> URL paths, through discovery.

Kinds are what users and definitions speak; the API speaks plurals. ``Discovery`` asks the
apiserver once per group-version and caches the answer per client; a kind that is not
served yields ``None`` (the member does not serve that workload type), never a guess.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from dispatcher.kube.errors import NotFound

if TYPE_CHECKING:
    from dispatcher.kube.client import KubeClient

__all__ = ["Discovery", "GroupKind", "GroupVersionKind", "ResourceRef", "split_api_version"]


def split_api_version(api_version: str) -> tuple[str, str]:
    """``"apps/v1"`` -> ``("apps", "v1")``; ``"v1"`` -> ``("", "v1")``."""
    group, _, version = api_version.rpartition("/")
    return group, version


@dataclass(frozen=True, slots=True)
class GroupVersionKind:
    """The identity of an object type: API group ("" for core), version and kind.

    The one spelling of a kind wherever it is compared or used as a key (catalog kinds,
    kinds a member serves, watched kinds); ``key`` is its serialised form for logs and
    string-keyed sets, and ``api_version`` the form objects carry.
    """

    group: str
    version: str
    kind: str

    @classmethod
    def of(cls, api_version: str, kind: str) -> GroupVersionKind:
        """From an object's ``apiVersion`` and ``kind``."""
        group, version = split_api_version(api_version)
        return cls(group, version, kind)

    @classmethod
    def of_object(cls, obj: Mapping[str, Any]) -> GroupVersionKind:
        """The type of a raw object (missing fields read as "")."""
        return cls.of(str(obj.get("apiVersion") or ""), str(obj.get("kind") or ""))

    @property
    def api_version(self) -> str:
        """``group/version``, or ``version`` for the core group."""
        return f"{self.group}/{self.version}" if self.group else self.version

    @property
    def key(self) -> str:
        """``apiVersion/kind``: the serialised form (logs, cache sync keys)."""
        return f"{self.api_version}/{self.kind}"

    def sort_key(self) -> tuple[str, str]:
        """(apiVersion, kind): the order lists of kinds are written in."""
        return self.api_version, self.kind

    @property
    def group_kind(self) -> GroupKind:
        """The kind whatever its version (an apiserver serves every version of a kind from
        the same objects, so one watch per ``GroupKind`` sees them all)."""
        return GroupKind(self.group, self.kind)


@dataclass(frozen=True, slots=True)
class GroupKind:
    """A kind whatever its version: what one watch covers."""

    group: str
    kind: str


@dataclass(frozen=True, kw_only=True)
class ResourceRef:
    """One served resource: enough to build its URLs."""

    group: str
    version: str
    kind: str
    plural: str
    namespaced: bool

    @property
    def gvk(self) -> GroupVersionKind:
        """The kind this resource serves."""
        return GroupVersionKind(self.group, self.version, self.kind)

    @property
    def api_version(self) -> str:
        return self.gvk.api_version

    def _base(self) -> str:
        return f"/apis/{self.group}/{self.version}" if self.group else f"/api/{self.version}"

    def collection(self, namespace: str | None = None) -> str:
        """The collection path (all namespaces when ``namespace`` is None)."""
        if self.namespaced and namespace:
            return f"{self._base()}/namespaces/{namespace}/{self.plural}"
        return f"{self._base()}/{self.plural}"

    def item(self, name: str, namespace: str | None = None, subresource: str = "") -> str:
        """The path of one object, or of its subresource (``status``)."""
        path = f"{self.collection(namespace)}/{name}"
        return f"{path}/{subresource}" if subresource else path


# Built-in resources the dispatcher touches, so it needs no discovery call for them.
NODES = ResourceRef(group="", version="v1", kind="Node", plural="nodes", namespaced=False)
PODS = ResourceRef(group="", version="v1", kind="Pod", plural="pods", namespaced=True)
NAMESPACES = ResourceRef(group="", version="v1", kind="Namespace", plural="namespaces",
                         namespaced=False)
SECRETS = ResourceRef(group="", version="v1", kind="Secret", plural="secrets", namespaced=True)
EVENTS = ResourceRef(group="", version="v1", kind="Event", plural="events", namespaced=True)
LEASES = ResourceRef(group="coordination.k8s.io", version="v1", kind="Lease", plural="leases",
                     namespaced=True)
CRDS = ResourceRef(group="apiextensions.k8s.io", version="v1", kind="CustomResourceDefinition",
                   plural="customresourcedefinitions", namespaced=False)
MEMBER_CLUSTERS = ResourceRef(group="dispatcher.io", version="v1alpha1", kind="MemberCluster",
                              plural="memberclusters", namespaced=False)
DISPATCHES = ResourceRef(group="dispatcher.io", version="v1alpha1", kind="Dispatch",
                         plural="dispatches", namespaced=True)
# Workload definitions on the hub, in both upstream formats (deploy/base/crds).
RESOURCE_INTERFACES = ResourceRef(group="optimization.nvidia.com", version="v1alpha1",
                                  kind="ResourceInterface", plural="resourceinterfaces",
                                  namespaced=False)
KARTAS = ResourceRef(group="run.ai", version="v1alpha1", kind="Karta", plural="kartas",
                     namespaced=False)


class Discovery:
    """Per-client cache of group-version discovery."""

    def __init__(self, client: KubeClient) -> None:
        self._client = client
        self._cache: dict[str, dict[str, ResourceRef]] = {}

    async def resource(self, api_version: str, kind: str, *, refresh: bool = False
                       ) -> ResourceRef | None:
        """The resource serving ``kind`` in ``api_version``, or None when not served."""
        if refresh or api_version not in self._cache:
            await self._load(api_version)
        return self._cache[api_version].get(kind)

    def forget(self) -> None:
        """Drop the cache (CRDs were added or removed)."""
        self._cache.clear()

    async def _load(self, api_version: str) -> None:
        group, version = split_api_version(api_version)
        path = f"/apis/{group}/{version}" if group else f"/api/{version}"
        try:
            body = await self._client.request("GET", path)
        except NotFound:
            self._cache[api_version] = {}
            return
        kinds: dict[str, ResourceRef] = {}
        for res in body.get("resources", []):
            if "/" in res.get("name", ""):
                continue  # subresources such as pods/status
            kinds[res["kind"]] = ResourceRef(group=group, version=version, kind=res["kind"],
                                             plural=res["name"],
                                             namespaced=bool(res.get("namespaced")))
        self._cache[api_version] = kinds
