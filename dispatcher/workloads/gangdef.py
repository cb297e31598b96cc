"""A definition's ``optimizationInstructions.gangScheduling``: its gangs (``podGroups``,
one ``podGroup`` with sub-groups, or a ``gangsPath``) and their topology constraints."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from dispatcher.workloads.demand import TopologyConstraint
from dispatcher.workloads.model import GANG_PER, GangGroup, GangScheduling
from dispatcher.workloads.recorder import Recorder

__all__ = ["GangReader"]


class GangReader(Recorder):
    """Reads ``gangScheduling`` (a part of ``reader.DocReader``)."""

    def _gangs(self, value: Any, field: str, *, names: set[str]) -> GangScheduling | None:
        raw = self._mapping(value, field,
                            allowed=frozenset({"podGroups", "podGroup", "gangsPath"}))
        if raw is None:
            return None
        forms = [k for k in ("podGroups", "podGroup", "gangsPath") if raw.get(k) is not None]
        if len(forms) > 1:
            self._issue(field, f"use one of podGroups, podGroup, gangsPath, not {forms}")
        if raw.get("gangsPath") is not None:
            path = self._expr(raw["gangsPath"], f"{field}.gangsPath")
            return GangScheduling(form="gangsPath", groups=(), path=path) if path else None
        if raw.get("podGroup") is not None:
            return self._pod_group(raw["podGroup"], f"{field}.podGroup", names=names)
        return self._pod_groups(raw.get("podGroups"), f"{field}.podGroups", names=names)

    def _pod_group(self, value: Any, where: str, *, names: set[str]) -> GangScheduling:
        """``podGroup``: one gang of sub-groups (upstream's form)."""
        group = self._mapping(value, where, allowed=frozenset(
            {"name", "topology", "subGroups", "minPodsPath"})) or {}
        members = []
        for i, sub in enumerate(self._list(group.get("subGroups"), f"{where}.subGroups")):
            item = self._mapping(sub, f"{where}.subGroups[{i}]", allowed=frozenset(
                {"componentName", "topology"})) or {}
            member = self._member(item, f"{where}.subGroups[{i}]", names=names,
                                  label="sub-group")
            # validated; a sub-group's own domain is not enforced (the whole gang's is)
            self._topology(item.get("topology"), f"{where}.subGroups[{i}].topology")
            if member:
                members.append(member)
        return GangScheduling(form="podGroup", groups=(GangGroup(
            topology=self._topology(group.get("topology"), f"{where}.topology"),
            name=self._string(group.get("name"), f"{where}.name", required=True) or "",
            members=tuple(members),
            min_pods=self._expr(group.get("minPodsPath"), f"{where}.minPodsPath")),))

    def _pod_groups(self, value: Any, field: str, *, names: set[str]) -> GangScheduling:
        """``podGroups``: named gangs, each of members, per workload or per instance."""
        groups = []
        seen: set[str] = set()
        for i, entry in enumerate(self._list(value, field)):
            where = f"{field}[{i}]"
            item = self._mapping(entry, where, required=True, allowed=frozenset(
                {"name", "members", "minPodsPath", "gangPer", "gangPerPath"})) or {}
            name = self._string(item.get("name"), f"{where}.name", required=True) or ""
            if name in seen:
                self._issue(f"{where}.name", f"pod group {name} is not unique")
            seen.add(name)
            groups.append(self._pod_group_entry(item, where, name=name, names=names))
        return GangScheduling(form="podGroups", groups=tuple(groups))

    def _pod_group_entry(self, item: Mapping[str, Any], where: str, *, name: str,
                         names: set[str]) -> GangGroup:
        members = []
        for j, raw_member in enumerate(self._list(item.get("members"), f"{where}.members")):
            mfield = f"{where}.members[{j}]"
            member_raw = self._mapping(raw_member, mfield, allowed=frozenset(
                {"componentName", "groupByKeyPaths", "filters"})) or {}
            member = self._member(member_raw, mfield, names=names, label="pod-group member")
            for key in ("groupByKeyPaths", "filters"):
                for k, path in enumerate(self._list(member_raw.get(key), f"{mfield}.{key}")):
                    self._pod_side(path, f"{mfield}.{key}[{k}]")
            if member:
                members.append(member)
        per = next((p for p in GANG_PER if p == item.get("gangPer", "workload")), None)
        if per is None:
            self._issue(f"{where}.gangPer", f"must be one of {', '.join(GANG_PER)}")
            per = "workload"
        per_path = self._expr(item.get("gangPerPath"), f"{where}.gangPerPath")
        if per_path is not None and "gangPer" in item:
            self._issue(f"{where}.gangPerPath", "use gangPer or gangPerPath, not both")
        min_pods = self._expr(item.get("minPodsPath"), f"{where}.minPodsPath")
        if min_pods is not None and (per != "workload" or per_path is not None):
            self._issue(f"{where}.minPodsPath", "only allowed with gangPer: workload")
        return GangGroup(name=name, members=tuple(members), per=per, min_pods=min_pods,
                         per_path=per_path)

    def _topology(self, value: Any, field: str) -> TopologyConstraint | None:
        """``podGroup.topology``: ``{topologyName, requiredTopologyLevel,
        preferredTopologyLevel}`` (upstream's CRD; KAI needs one of the two levels). A level
        is a node label key; each member resolves it against its own topology levels. The
        required level wins; a preferred one alone is a preference. ``topologyName`` names
        the scheduler's Topology object: the member's declared levels play that part here."""
        raw = self._mapping(value, field, allowed=frozenset(
            {"topologyName", "requiredTopologyLevel", "preferredTopologyLevel"}))
        if raw is None:
            return None
        self._string(raw.get("topologyName"), f"{field}.topologyName")
        required = self._string(raw.get("requiredTopologyLevel"),
                                f"{field}.requiredTopologyLevel")
        preferred = self._string(raw.get("preferredTopologyLevel"),
                                 f"{field}.preferredTopologyLevel")
        if not required and not preferred:
            self._issue(field, "give requiredTopologyLevel or preferredTopologyLevel")
            return None
        source = f"definition {self.name or '?'} {field}"
        if required:
            return TopologyConstraint(level=required, required=True, source=source)
        return TopologyConstraint(level=preferred or "", required=False, source=source)

    def _member(self, item: Mapping[str, Any], field: str, *, names: set[str],
                label: str) -> str | None:
        name = self._string(item.get("componentName"), f"{field}.componentName",
                            required=True)
        if name and name not in names:
            self._issue(f"{field}.componentName", f"{label} component '{name}' is not "
                        "defined (should be a root or child component)")
            return None
        return name or None
