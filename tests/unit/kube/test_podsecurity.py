"""The Pod Security label rules (kube/podsecurity.py), on plain label sets.

Covers: labels read as kube-apiserver's PodSecurity plugin reads them (absent: privileged;
an unparseable enforce level: restricted, audit/warn: privileged; an unparseable version:
latest); the member labels never weaker than the hub's labels in any mode nor than the
floor for enforce (hypothesis over arbitrary label sets, valid and invalid values), always
valid values, and the least such (no stricter than both inputs ask); ``weaker`` agrees with
that order, levels first, versions within a level, a privileged hub asking nothing.
"""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from dispatcher.kube import podsecurity as ps
from dispatcher.kube.podsecurity import LEVELS, MODES, PREFIX, Policy

ENFORCE = f"{PREFIX}enforce"

levels = st.sampled_from([*LEVELS, "bogus", "", "Restricted"])
versions = st.sampled_from(["latest", "v1.0", "v1.25", "v1.34", "v1.99", "v2.0", "1.30",
                            "v1.07", ""])


@st.composite
def label_sets(draw: st.DrawFn) -> dict[str, str]:
    labels: dict[str, str] = {}
    for mode in MODES:
        if draw(st.booleans()):
            labels[f"{PREFIX}{mode}"] = draw(levels)
        if draw(st.booleans()):
            labels[f"{PREFIX}{mode}-version"] = draw(versions)
    if draw(st.booleans()):
        labels["team"] = "a"
    return labels


@given(hub=label_sets(), floor=st.sampled_from(LEVELS))
def test_member_labels_are_never_weaker_than_either_input(hub: dict[str, str],
                                                          floor: str) -> None:
    out = ps.member_labels(hub, floor=floor)
    got, asked = ps.policy(out), ps.policy(hub)
    for mode in MODES:
        assert got[mode].covers(asked[mode]), (mode, got[mode], asked[mode])
    assert got["enforce"].covers(Policy(floor))
    assert got["audit"].covers(got["enforce"]) and got["warn"].covers(got["enforce"])
    assert ps.weaker(out, hub) is None
    for key, value in out.items():  # only valid values: read back exactly as written
        assert key.startswith(PREFIX)
        if key.endswith("-version"):
            assert value == "latest" or ps._VERSION.fullmatch(value)
        else:
            assert value in LEVELS and value != "privileged"


@given(hub=label_sets(), floor=st.sampled_from(LEVELS))
def test_member_enforce_is_no_stricter_than_the_inputs_ask(hub: dict[str, str],
                                                           floor: str) -> None:
    enforce = ps.policy(ps.member_labels(hub, floor=floor))["enforce"]
    asked = ps.policy(hub)["enforce"]
    assert enforce.rank == max(asked.rank, LEVELS.index(floor))


@given(member=label_sets(), hub=label_sets())
def test_weaker_is_the_negation_of_covers(member: dict[str, str], hub: dict[str, str]) -> None:
    found = ps.weaker(member, hub)
    theirs, ours = ps.policy(member)["enforce"], ps.policy(hub)["enforce"]
    assert (found is None) == theirs.covers(ours)
    if found is not None:
        assert found == (theirs, ours) and theirs != ours


@pytest.mark.parametrize(("labels", "enforce", "audit"), [
    ({}, "privileged:latest", "privileged:latest"),
    ({ENFORCE: "baseline", f"{ENFORCE}-version": "v1.25"}, "baseline:v1.25",
     "privileged:latest"),
    ({ENFORCE: "bogus"}, "restricted:latest", "privileged:latest"),     # fails closed
    ({f"{PREFIX}audit": "bogus"}, "privileged:latest", "privileged:latest"),  # fails open
    ({ENFORCE: "restricted", f"{ENFORCE}-version": "2"}, "restricted:latest",
     "privileged:latest"),
])
def test_labels_read_as_the_podsecurity_plugin_reads_them(labels: dict[str, str],
                                                          enforce: str, audit: str) -> None:
    read = ps.policy(labels)
    assert (str(read["enforce"]), str(read["audit"])) == (enforce, audit)


@pytest.mark.parametrize(("hub", "floor", "expected"), [
    ({}, "baseline", {ENFORCE: "baseline", f"{ENFORCE}-version": "latest"}),
    ({ENFORCE: "restricted"}, "baseline", {ENFORCE: "restricted"}),
    ({ENFORCE: "privileged"}, "baseline", {ENFORCE: "baseline"}),   # never below the floor
    ({ENFORCE: "bogus"}, "baseline", {ENFORCE: "restricted"}),      # as the hub enforces it
    ({}, "privileged", {}),                                         # the member's default
    # a pinned hub version is kept only where the floor asks nothing
    ({ENFORCE: "restricted", f"{ENFORCE}-version": "v1.25"}, "privileged",
     {ENFORCE: "restricted", f"{ENFORCE}-version": "v1.25"}),
    ({ENFORCE: "restricted", f"{ENFORCE}-version": "v1.25"}, "baseline",
     {ENFORCE: "restricted", f"{ENFORCE}-version": "latest"}),
    ({ENFORCE: "baseline", f"{PREFIX}warn": "restricted", f"{PREFIX}warn-version": "v1.30"},
     "privileged", {ENFORCE: "baseline", f"{PREFIX}warn": "restricted",
                    f"{PREFIX}warn-version": "latest"}),
])
def test_member_labels_examples(hub: dict[str, str], floor: str,
                                expected: dict[str, str]) -> None:
    out = ps.member_labels(hub, floor=floor)
    assert {k: v for k, v in out.items() if k in expected} == expected
    assert (ENFORCE in out) == (ENFORCE in expected)


def test_audit_and_warn_follow_enforce() -> None:
    out = ps.member_labels({ENFORCE: "restricted"}, floor="baseline")
    assert out == {f"{PREFIX}{m}{s}": v for m in MODES
                   for s, v in (("", "restricted"), ("-version", "latest"))}


@pytest.mark.parametrize(("member", "hub", "weaker"), [
    ({}, {ENFORCE: "restricted"}, True),                      # no label: privileged
    ({ENFORCE: "privileged"}, {ENFORCE: "restricted"}, True),
    ({ENFORCE: "baseline"}, {ENFORCE: "restricted"}, True),
    ({ENFORCE: "restricted"}, {ENFORCE: "baseline"}, False),
    ({ENFORCE: "restricted", f"{ENFORCE}-version": "v1.25"}, {ENFORCE: "baseline"}, True),
    ({ENFORCE: "baseline", f"{ENFORCE}-version": "v1.30"},
     {ENFORCE: "baseline", f"{ENFORCE}-version": "v1.25"}, False),
    ({}, {}, False),                                          # the hub asks nothing
    ({}, {ENFORCE: "privileged", f"{ENFORCE}-version": "v1.30"}, False),
])
def test_weaker_examples(member: dict[str, str], hub: dict[str, str], weaker: bool) -> None:
    assert (ps.weaker(member, hub) is not None) == weaker


def test_describe_says_when_there_is_no_label() -> None:
    assert ps.describe({}) == "privileged:latest (no label)"
    assert ps.describe({ENFORCE: "restricted"}) == "restricted:latest"


def _probed(where: str, action: str, host: str, name: str = "a") -> dict:
    """A pod spec with one container whose probe or lifecycle handler ``where`` (dotted)
    uses ``action`` with ``host``."""
    container: dict = {"name": name}
    *outer, last = where.split(".")
    at = container
    for key in outer:
        at = at.setdefault(key, {})
    at[last] = {action: {"host": host, "port": 80}}
    return {"containers": [container]}


@pytest.mark.parametrize("where,action", [
    ("livenessProbe", "httpGet"), ("readinessProbe", "tcpSocket"),
    ("startupProbe", "httpGet"), ("lifecycle.postStart", "tcpSocket"),
    ("lifecycle.preStop", "httpGet")])
def test_every_probe_and_lifecycle_host_fails_the_1_34_check(where: str, action: str) -> None:
    """The fields of pod-security-admission v0.37.2's ``hostProbesAndHostLifecycle``, a
    local address included (its test cases: 127.0.0.1, ::1, localhost are refused)."""
    for host in ("invalid.host", "127.0.0.1", "::1", "localhost"):
        found = ps.unenforced(Policy("baseline"), 33, _probed(where, action, host))
        assert found == [f"hostProbesAndHostLifecycle (1.34+): container 'a' uses probe or "
                         f"lifecycle host(s) '{host}'"]


def test_the_host_probe_check_covers_every_container_list_and_only_set_hosts() -> None:
    spec = {"initContainers": [_probed("startupProbe", "httpGet", "a.com", "i")[
                "containers"][0]],
            "containers": [{"name": "ok", "livenessProbe": {"httpGet": {"host": "",
                                                                         "port": 80}}}],
            "ephemeralContainers": [_probed("readinessProbe", "tcpSocket", "b.com", "e")[
                "containers"][0]]}
    found = ps.unenforced(Policy("restricted"), 30, spec)
    assert len(found) == 1 and "container 'i'" in found[0] and "container 'e'" in found[0]
    assert "'ok'" not in found[0]
    assert ps.unenforced(Policy("restricted"), 30, {"containers": [{"name": "x"}]}) == []


def test_only_a_member_older_than_a_check_the_level_has_lacks_it() -> None:
    """Lacking: the level has the check (baseline and restricted, not privileged), its
    version includes it (latest or v1.34+), and the member's minor is older than 1.34; a
    member whose minor is not known lacks nothing here (its dry-run judges)."""
    spec = _probed("livenessProbe", "httpGet", "h")
    assert ps.unenforced(Policy("baseline"), 33, spec)
    assert ps.unenforced(Policy("baseline", 34), 33, spec)
    assert not ps.unenforced(Policy("baseline", 33), 33, spec)
    assert not ps.unenforced(Policy("privileged"), 33, spec)
    assert not ps.unenforced(Policy("restricted"), 34, spec)
    assert not ps.unenforced(Policy("restricted"), 37, spec)
    assert not ps.unenforced(Policy("restricted"), None, spec)


def test_the_required_level_never_goes_below_the_floor() -> None:
    assert ps.required({}, floor="baseline") == Policy("baseline")
    assert ps.required({ENFORCE: "restricted", f"{ENFORCE}-version": "v1.30"},
                       floor="baseline") == Policy("restricted")  # the floor is latest
    assert ps.required({ENFORCE: "restricted", f"{ENFORCE}-version": "v1.30"},
                       floor="privileged") == Policy("restricted", 30)
    assert ps.required({}, floor="privileged") == Policy("privileged")
