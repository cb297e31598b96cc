"""``kube.ssa.owned``: the part of an object one managedFields entry owns, so an apply as
that manager (Kueue's ``kueue-admission``) keeps every field it owns and adds one."""

from __future__ import annotations

from typing import Any

from dispatcher.kube.ssa import apply_entry, owned

# A Workload's status as Kueue v0.17.0 leaves it once quota is reserved: the
# kueue-admission Apply entry owns the admission, two conditions and the check; another
# manager owns a third condition.
STATUS: dict[str, Any] = {
    "admission": {"clusterQueue": "gpus", "podSetAssignments": [
        {"name": "main", "count": 2, "flavors": {"nvidia.com/gpu": "h100"}}]},
    "conditions": [
        {"type": "QuotaReserved", "status": "True", "reason": "QuotaReserved"},
        {"type": "Admitted", "status": "False", "reason": "NoChecks"},
        {"type": "Other", "status": "True", "reason": "Theirs"}],
    "admissionChecks": [{"name": "multikueue", "state": "Pending", "message": ""}],
    "resourceRequests": [{"name": "main", "resources": {"nvidia.com/gpu": "2"}}],
}
FIELDS: dict[str, Any] = {"f:status": {
    "f:admission": {".": {}, "f:clusterQueue": {}, "f:podSetAssignments": {}},
    "f:conditions": {
        'k:{"type":"QuotaReserved"}': {".": {}, "f:type": {}, "f:status": {}, "f:reason": {}},
        'k:{"type":"Admitted"}': {".": {}, "f:type": {}, "f:status": {}}},
    "f:admissionChecks": {'k:{"name":"multikueue"}': {".": {}, "f:name": {}, "f:state": {}}},
    "f:resourceRequests": {}}}
OBJ = {"metadata": {"managedFields": [
    {"manager": "kueue", "operation": "Update", "subresource": "status", "fieldsV1": {}},
    {"manager": "kueue-admission", "operation": "Apply", "subresource": "status",
     "fieldsV1": FIELDS}]}, "status": STATUS}


def test_the_apply_entry_of_a_manager_on_a_subresource() -> None:
    assert apply_entry(OBJ, manager="kueue-admission", subresource="status") == FIELDS
    assert apply_entry(OBJ, manager="kueue-admission") == {}  # not on the main resource
    assert apply_entry(OBJ, manager="kueue", subresource="status") == {}  # an Update


def test_owned_keeps_what_the_manager_owns_and_nothing_else() -> None:
    mine = owned(STATUS, FIELDS["f:status"])
    assert mine == {
        "admission": STATUS["admission"],
        "conditions": [{"type": "QuotaReserved", "status": "True", "reason": "QuotaReserved"},
                       {"type": "Admitted", "status": "False"}],
        "admissionChecks": [{"name": "multikueue", "state": "Pending"}],
        "resourceRequests": STATUS["resourceRequests"]}


def test_items_by_value_and_index_and_absent_ones() -> None:
    assert owned({"s": ["a", "b"]}, {"f:s": {'v:"b"': {}, 'v:"z"': {}}}) == {"s": ["b"]}
    assert owned({"l": [{"x": 1}, {"x": 2}]}, {"f:l": {"i:1": {"f:x": {}}, "i:5": {}}}) \
        == {"l": [{"x": 2}]}
    assert owned({"m": {"a": 1}}, {"f:m": {".": {}}, "f:gone": {}}) == {"m": {}}
