"""The shared hub's admission decision: hold each dispatched workload, refuse what cannot be.

On a shared hub (``hub.mode: shared``) the hub's own controllers and operators run, so a
workload the dispatcher sends to a member would also run on the hub. The dispatcher's
mutating webhook (``shell/webhook.py``) asks ``review`` for every create and update of a
catalog kind; the answer is an AdmissionReview response:

- out of scope (a namespace or labels the controller does not dispatch): allowed as is;
- CREATE of a kind whose definition holds it: the hold's JSON Patch (``workloads/holds``);
- CREATE of a kind nothing can hold (``hubHold.refuse``, or no ``hubHold``): denied with the
  reason, so it never runs twice silently;
- UPDATE that would drop a hold the object had: the hold put back;
- UPDATE that would put a hold on an object created without one, touch the webhook's
  ``HOLD_ANNOTATION``, change a managedBy value or give a held object a controller owner:
  denied (``update_refusal``: the hold is set at creation and kept for the object's life);
- a ``managedBy`` someone else set (Kueue MultiKueue): allowed unchanged, with a warning;
  the controller does not dispatch it either (``unheld_reason``); the kind's own
  controller's value (``hubHold.managedBy.controllers``) is no one else's: replaced;
- a ``HOLD_ANNOTATION`` a CREATE comes with is removed unless the webhook sets the pause
  itself (only its own marker unpauses a member copy);
- CREATE of an object a controller owns (an ownerReference with ``controller: true``: the
  pods of a DaemonSet, the Jobs of an Argo Workflow): allowed as is. It is part of its
  owner's workload, never one of its own (``controller_owner``); the controller does not
  dispatch it. Without this, putting ``Pod`` in the catalog would refuse every pod the
  shared hub's own controllers create in a dispatched namespace.

``unheld_reason`` is the controller's own check of the same rule (an object created before
the webhook was installed, or while ``failurePolicy`` was not ``Fail``): such a workload is
parked, never dispatched. Pure: plain dicts in, plain dicts out.
"""

from __future__ import annotations

import base64
import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from dispatcher.placement.selector import Selector, parse_selector
from dispatcher.workloads.catalog import Catalog
from dispatcher.workloads.holds import (
    HOLD_ANNOTATION,
    Hold,
    HoldState,
    hold_patch,
    hold_state,
    marker,
)
from dispatcher.workloads.model import Definition
from dispatcher.workloads.paths import value_at

__all__ = ["NOT_OWNED", "WEBHOOK_NAME", "WEBHOOK_PATH", "HoldScope", "configuration",
           "controller_owner", "review", "unheld_reason", "update_refusal"]

WEBHOOK_NAME = "hold.dispatcher.io"
WEBHOOK_PATH = "/mutate"


@dataclass(frozen=True, kw_only=True)
class HoldScope:
    """Which hub objects the controller dispatches (``watch.*`` of the config)."""

    namespaces: tuple[str, ...] = ()  # empty: all
    skip: frozenset[str] = frozenset()  # the controller's own namespace
    selector: Selector = field(default_factory=Selector)

    @classmethod
    def watching(cls, *, namespaces: tuple[str, ...], own: str, selector: str
                 ) -> HoldScope:
        """The scope of ``watch.namespaces`` and ``watch.labelSelector``, the controller's
        ``own`` namespace left out."""
        return cls(namespaces=namespaces, skip=frozenset({own}),
                   selector=parse_selector(selector))

    def covers(self, namespace: str, labels: Mapping[str, str]) -> bool:
        """True when the controller would dispatch an object here with these labels."""
        if not namespace or namespace in self.skip or namespace.startswith("kube-"):
            return False
        if self.namespaces and namespace not in self.namespaces:
            return False
        return self.selector.matches(labels)


def controller_owner(obj: Mapping[str, Any]) -> str | None:
    """``Kind/name`` of the controller that owns ``obj`` (its ownerReference with
    ``controller: true``), or None for an object of its own: only those are workloads."""
    meta = obj.get("metadata")
    refs = meta.get("ownerReferences") if isinstance(meta, Mapping) else None
    for ref in refs if isinstance(refs, list) else ():
        if isinstance(ref, Mapping) and ref.get("controller") is True:
            return f"{ref.get('kind') or '?'}/{ref.get('name') or '?'}"
    return None


def unheld_reason(obj: Mapping[str, Any], definition: Definition) -> str | None:
    """Why the controller must not dispatch ``obj`` from a shared hub (None: it is held)."""
    hold = definition.hold
    if hold is None:
        return (f"definition {definition.name} declares no copyDefinition.hubHold: nothing "
                f"keeps the shared hub's own controllers from running it; dispatch it from a "
                f"dedicated hub, or give the definition a hold")
    state = hold_state(obj, hold)
    if state == HoldState.HELD:
        return None
    if state == HoldState.REFUSED:
        return f"cannot be held on a shared hub: {hold.reason}"
    if state == HoldState.FOREIGN:
        return (f"{hold.dotted} is {value_at(obj, hold.path)!r}: another system manages it, "
                f"so the dispatcher leaves it alone")
    return (f"created without the hub hold ({hold.dotted}: {hold.value!r}), so the shared "
            f"hub's controllers may be running it: not dispatched. Recreate it while the "
            f"dispatcher's webhook is installed")


def _labels(obj: Mapping[str, Any]) -> Mapping[str, str]:
    meta = obj.get("metadata")
    labels = meta.get("labels") if isinstance(meta, Mapping) else None
    return labels if isinstance(labels, Mapping) else {}


def _held_before(old: Mapping[str, Any], hold: Hold) -> str:
    """The hold state an UPDATE starts from. An owned object was never reviewed (its
    CREATE and its owned -> owned updates are not sent), so a hold it carries was not set
    by the webhook: it counts as free, and freeing it from its owner cannot make it held."""
    state = hold_state(old, hold)
    return HoldState.FREE if state == HoldState.HELD and controller_owner(old) else state


def update_refusal(old: Mapping[str, Any], new: Mapping[str, Any], hold: Hold, *,
                   kind: str) -> str | None:
    """Why an UPDATE may not pass (None: it may): the hold is the object's whole life.

    Only the webhook sets a hold, at creation: an object that was not held cannot become
    held (a pause put on later leaves what the hub already runs running, and a managedBy
    put on later came after the hub's controller took it); ``HOLD_ANNOTATION`` is the
    webhook's record and cannot be added, changed or removed; a managedBy value, whatever
    the kind's CRD enforces, never changes (dropping ours only has it put back); a held
    object cannot gain a controller owner (the webhook never sees owned objects again, so
    its next update could release it on the hub)."""
    before, after = _held_before(old, hold), hold_state(new, hold)
    if marker(old) != marker(new):
        return (f"{HOLD_ANNOTATION} on {kind} records the hold the dispatcher set at "
                f"creation: it cannot be added, changed or removed")
    if before != HoldState.HELD and after == HoldState.HELD:
        return (f"a hold is set at creation, by the dispatcher: {kind} was created without "
                f"it ({hold.dotted}), so this hub may be running it already; recreate it "
                f"to have it dispatched")
    if hold.kind == "managedBy" and value_at(old, hold.path) != value_at(new, hold.path) \
            and not (before == HoldState.HELD and after == HoldState.FREE):
        return f"{hold.dotted} of {kind} says who runs it: it cannot change after creation"
    if before == HoldState.HELD and controller_owner(new) is not None \
            and controller_owner(old) is None:
        return (f"{kind} is dispatched by the dispatcher: it cannot be given a controller "
                f"owner ({controller_owner(new)})")
    return None


def _response(uid: str, *, allowed: bool = True, message: str = "",
              patch: list[dict[str, Any]] | None = None,
              warnings: list[str] | None = None) -> dict[str, Any]:
    out: dict[str, Any] = {"uid": uid, "allowed": allowed}
    if not allowed:
        out["status"] = {"code": 403, "reason": "Forbidden", "message": message}
    if patch:
        out["patchType"] = "JSONPatch"
        out["patch"] = base64.b64encode(json.dumps(patch).encode()).decode()
    if warnings:
        out["warnings"] = [w[:256] for w in warnings]
    return out


def review(request: Mapping[str, Any], *, catalog: Catalog, scope: HoldScope
           ) -> dict[str, Any]:
    """The AdmissionReview ``response`` for one ``request`` (see the module docstring)."""
    uid = str(request.get("uid") or "")
    obj = request.get("object")
    if not isinstance(obj, Mapping) or request.get("operation") not in ("CREATE", "UPDATE"):
        return _response(uid)
    definition = catalog.find(str(obj.get("apiVersion") or ""), str(obj.get("kind") or ""))
    raw_meta = obj.get("metadata")
    meta: Mapping[str, Any] = raw_meta if isinstance(raw_meta, Mapping) else {}
    namespace = str(request.get("namespace") or meta.get("namespace") or "")
    old = request.get("oldObject") if request.get("operation") == "UPDATE" else None
    covered = scope.covers(namespace, _labels(obj))
    was_covered = isinstance(old, Mapping) and scope.covers(namespace, _labels(old))
    if definition is None or not (covered or was_covered):
        return _response(uid)
    hold = definition.hold
    kind = f"{obj.get('kind')} {namespace}/{meta.get('name') or meta.get('generateName') or ''}"
    if request.get("operation") == "UPDATE":
        if hold is None or hold.kind == "refuse" or not isinstance(old, Mapping):
            return _response(uid)
        refused = update_refusal(old, obj, hold, kind=kind)
        before = _held_before(old, hold)
        if refused is None and not covered and before == HoldState.HELD:
            # past here its updates are not sent: an unpause would run it on the hub
            refused = (f"{kind} is dispatched: it cannot leave what the dispatcher "
                       f"watches (its labels select it); delete it instead")
        if refused is not None:
            return _response(uid, allowed=False, message=f"dispatcher.io: {refused}")
        if before != HoldState.HELD or hold_state(obj, hold) == HoldState.HELD:
            return _response(uid)
        return _response(uid, patch=hold_patch(obj, hold), warnings=[
            f"{hold.dotted} is how the dispatcher keeps {kind} from running on this hub: "
            f"kept at {hold.value!r}"])
    if controller_owner(obj) is not None:  # its owner is the workload
        return _response(uid)
    reason = unheld_reason(obj, definition)
    if hold is None or hold.kind == "refuse":
        return _response(uid, allowed=False,
                         message=f"dispatcher.io: {kind} {reason}")
    state = hold_state(obj, hold)
    if state == HoldState.FOREIGN:
        return _response(uid, warnings=[f"dispatcher.io: {reason}"])
    return _response(uid, patch=hold_patch(obj, hold))


_OWNED = "has({o}.metadata.ownerReferences) && {o}.metadata.ownerReferences.exists(r, " \
         "has(r.controller) && r.controller)"
NOT_OWNED = {
    "name": "not-a-controllers-child",
    # CREATE of an object a controller owns never reaches the webhook (review would pass it
    # anyway); an UPDATE does when the object was not owned before, so a held object that
    # gains an owner keeps its hold.
    "expression": f"!({_OWNED.format(o='object')}) || (request.operation == 'UPDATE' && "
                  f"!({_OWNED.format(o='oldObject')}))",
}
"""The webhook's matchCondition: the shared hub's own controllers' children (its pods,
above all, now that Pod is a catalog kind) are never sent, so a webhook that is down delays
none of them."""

_OBJECT_OPERATORS = {"=": "In", "in": "In", "!=": "NotIn", "notin": "NotIn",
                     "exists": "Exists", "!": "DoesNotExist"}


def _namespace_selector(scope: HoldScope, skip: tuple[str, ...]) -> dict[str, Any]:
    key = "kubernetes.io/metadata.name"
    if scope.namespaces:  # only what is dispatched: a webhook that is down stalls no one else
        wanted = sorted(set(scope.namespaces) - set(skip))
        return {"matchExpressions": [{"key": key, "operator": "In", "values": wanted}]}
    return {"matchExpressions": [{"key": key, "operator": "NotIn",
                                  "values": sorted(set(skip))}]}


def _object_selector(scope: HoldScope) -> dict[str, Any] | None:
    """``watch.labelSelector`` as the webhook's objectSelector (None when it has ``>``/``<``,
    which an objectSelector cannot say: ``review`` then filters alone)."""
    terms = []
    for req in scope.selector.requirements:
        operator = _OBJECT_OPERATORS.get(req.operator)
        if operator is None:
            return None
        term: dict[str, Any] = {"key": req.key, "operator": operator}
        if operator in ("In", "NotIn"):
            term["values"] = sorted(req.values)
        terms.append(term)
    return {"matchExpressions": terms} if terms else None


def configuration(*, name: str, resources: Mapping[tuple[str, str], list[str]],
                  client_config: Mapping[str, Any], skip: tuple[str, ...],
                  scope: HoldScope | None = None) -> dict[str, Any]:
    """The MutatingWebhookConfiguration the controller keeps current on a shared hub.

    ``resources`` maps (group, version) to the plural names of the catalog's kinds the hub
    serves. ``failurePolicy: Fail``: while the webhook cannot answer, creating a dispatched
    kind fails (the client retries) instead of passing unheld and running on the hub as
    well as on a member. ``skip`` (the controller's own namespace and the ``kube-*`` ones)
    is never sent, so the controller itself and the cluster's add-ons never wait on it; with
    ``watch.namespaces`` (``scope``) only those namespaces are, and ``watch.labelSelector``
    becomes the objectSelector.
    ``reinvocationPolicy: IfNeeded``: called again if a later webhook changes the object.
    """
    scope = scope or HoldScope()
    rules = [{"apiGroups": [group], "apiVersions": [version], "resources": sorted(plurals),
              "operations": ["CREATE", "UPDATE"], "scope": "Namespaced"}
             for (group, version), plurals in sorted(resources.items()) if plurals]
    return {
        "apiVersion": "admissionregistration.k8s.io/v1",
        "kind": "MutatingWebhookConfiguration",
        "metadata": {"name": name, "labels": {"app.kubernetes.io/name": "dispatcher"}},
        "webhooks": [{
            "name": WEBHOOK_NAME,
            "admissionReviewVersions": ["v1"],
            "sideEffects": "None",
            "failurePolicy": "Fail",
            "matchPolicy": "Equivalent",
            "reinvocationPolicy": "IfNeeded",
            "timeoutSeconds": 5,
            "clientConfig": dict(client_config),
            "namespaceSelector": _namespace_selector(scope, skip),
            "matchConditions": [dict(NOT_OWNED)],
            "rules": rules,
            **({"objectSelector": selector} if (selector := _object_selector(scope)) else {}),
        }],
    }
