"""Hub discovery is read again only when the CRDs' served kinds change.

Covers: a CRD status update (accepted names, stored versions) or a re-list of the same
CRDs changes nothing; a new CRD, a served version added, Established turning True and a
deleted CRD each do. Not covered: the debounce and the discovery read themselves
(integration tests: a CRD created while the controller runs is watched).
"""

from __future__ import annotations

import copy
from typing import Any

from dispatcher.control.watchers import crds_served
from dispatcher.kube import watch


def _crd(name: str = "trainruns.demo.example", *, versions: tuple[str, ...] = ("v1",),
         established: bool = True) -> dict[str, Any]:
    return {"metadata": {"name": name, "resourceVersion": "1"},
            "spec": {"group": "demo.example", "names": {"kind": "TrainRun"},
                     "versions": [{"name": v, "served": True} for v in versions]},
            "status": {"conditions": [
                {"type": "NamesAccepted", "status": "True"},
                {"type": "Established", "status": "True" if established else "False"}],
                "storedVersions": ["v1"]}}


def test_only_real_changes_of_what_crds_serve_count() -> None:
    known = crds_served({}, watch.Listed(objects=[_crd()], resource_version="1"))
    assert known == {"trainruns.demo.example": ("demo.example", "TrainRun", ("v1",), True)}

    status_only = copy.deepcopy(_crd())
    status_only["metadata"]["resourceVersion"] = "2"
    status_only["status"]["storedVersions"] = ["v1", "v2"]
    status_only["status"]["acceptedNames"] = {"kind": "TrainRun"}
    assert crds_served(known, watch.Changed(type="MODIFIED", object=status_only)) == known
    assert crds_served(known, watch.Listed(objects=[_crd()], resource_version="9")) == known

    for changed in (watch.Changed(type="ADDED", object=_crd("other.demo.example")),
                    watch.Changed(type="MODIFIED", object=_crd(versions=("v1", "v2"))),
                    watch.Changed(type="DELETED", object=_crd())):
        assert crds_served(known, changed) != known
    pending = crds_served({}, watch.Listed(objects=[_crd(established=False)],
                                           resource_version="1"))
    assert crds_served(pending, watch.Changed(type="MODIFIED", object=_crd())) != pending
