"""dispatcher.config: defaults, the shipped files, overrides, and errors naming file and key.

Covered: empty file = defaults; config/default.yaml and config/local.yaml load; every
section reaches its setting; --set overrides; unknown keys, wrong types, bad choices and
bad numbers name the file and the key path; broken YAML names the line. Left out: the
fleet settings' own validation (tests/unit/fleet).
"""

from __future__ import annotations

from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from dispatcher import config
from dispatcher.control.core.decide import Rules
from dispatcher.control.settings import ControlSettings

ROOT = Path(__file__).resolve().parents[3]


def write(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "c.yaml"
    path.write_text(text)
    return path


def test_empty_file_is_the_defaults(tmp_path: Path) -> None:
    loaded = config.load(write(tmp_path, ""))
    assert loaded.control == ControlSettings()


@pytest.mark.parametrize("name", ["default.yaml", "local.yaml"])
def test_shipped_files_load(name: str) -> None:
    loaded = config.load(ROOT / "config" / name)
    assert loaded.control.hub_id


def test_default_file_spells_out_the_defaults() -> None:
    assert config.load(ROOT / "config" / "default.yaml").control == ControlSettings()


def test_sections_reach_settings(tmp_path: Path) -> None:
    loaded = config.load(write(tmp_path, """
hubId: h1
hub: {kubeconfig: hub.kc}
watch: {namespaces: [a, b], labelSelector: team=x}
failover: {policy: always, memberLostAfter: 7, stuckAfter: 9, maxAttempts: 2}
submit: {podTemplate: {schedulerName: kai, labels: {x: "1"}}, weakerMemberNamespaces: allow,
         podSecurityFloor: restricted}
fleet:
  staticMembers: [{name: m1, kubeconfig: m1.kc, labels: {region: eu}}]
  unreachableAfter: 4
"""))
    c = loaded.control
    assert (c.hub_id, c.namespaces, c.label_selector) == ("h1", ("a", "b"), "team=x")
    assert (c.rules.policy, c.rules.member_lost_after, c.rules.stuck_after,
            c.rules.max_attempts) == ("always", 7.0, 9.0, 2)
    assert c.pod_mutations.scheduler_name == "kai"
    assert (c.weaker_member_namespaces, c.pod_security_floor) == ("allow", "restricted")
    assert dict(c.pod_mutations.labels) == {"x": "1"}
    assert loaded.hub_kubeconfig == str(tmp_path / "hub.kc")
    (member,) = loaded.fleet.static_members
    assert member.kubeconfig == str(tmp_path / "m1.kc")
    assert loaded.fleet.unreachable_after_s == 4.0


def test_pod_field_allow_lists_reach_the_policy(tmp_path: Path) -> None:
    loaded = config.load(write(tmp_path, """
submit:
  podTemplate:
    priorityClassName: batch
    allowedPriorityClasses: [low]
    byNamespace: {team-prod: {allowedPriorityClasses: [high], allowedSchedulers: [volcano]}}
"""))
    policy = loaded.control.pod_policy
    assert policy.for_namespace("team-a").priority_classes == {"low", "batch"}
    prod = policy.for_namespace("team-prod")
    assert prod.priority_classes == {"low", "high", "batch"}
    assert prod.schedulers == {"volcano", "default-scheduler"}
    assert config.load(write(tmp_path, "")).control.pod_policy.for_namespace("x") \
        .priority_classes == frozenset()


def test_the_fleet_view_is_off_unless_asked_for(tmp_path: Path) -> None:
    assert config.load(write(tmp_path, "")).control.server.fleet_view is False
    server = config.load(write(tmp_path, "server: {fleetView: true, port: 9090}")) \
        .control.server
    assert (server.fleet_view, server.port) == (True, 9090)


def test_overrides_win(tmp_path: Path) -> None:
    loaded = config.load(write(tmp_path, "failover: {policy: never}\n"),
                         overrides=["failover.policy=always", "workers=8"])
    assert loaded.control.rules.policy == "always"
    assert loaded.control.workers == 8


@pytest.mark.parametrize(("text", "key"), [
    ("failover: {policy: sometimes}", "failover.policy"),
    ("failover: {memberLostAfter: -1}", "failover.memberLostAfter"),
    ("watch: {namespaces: a}", "watch.namespaces"),
    ("workers: 0", "workers"),
    ("surprise: 1", "surprise"),
    ("leaderElection: {leaseDuration: 2, renewEvery: 3}", "leaderElection.renewEvery"),
    ("fleet: {staticMembers: [{name: m}]}", "fleet.staticMembers[0].kubeconfig"),
    ("fleet: {probeInterval: 0}", "fleet.probeInterval"),
    ("events: yes-please", "events"),
    ("server: {fleetView: yes-please}", "server.fleetView"),
    ("server: {fleetView: true, port: 0}", "server.fleetView"),
    ("submit: {weakerMemberNamespaces: warn}", "submit.weakerMemberNamespaces"),
    ("submit: {weakerMemberNamespaces: false}", "submit.weakerMemberNamespaces"),
    ("submit: {podSecurityFloor: strict}", "submit.podSecurityFloor"),
    ("submit: {podTemplate: {allowedPriorityClasses: high}}",
     "submit.podTemplate.allowedPriorityClasses"),
    ("submit: {podTemplate: {allowedSchedulers: ['']}}",
     "submit.podTemplate.allowedSchedulers[0]"),
    ("submit: {podTemplate: {byNamespace: {a: {allowedNodes: [n]}}}}",
     "submit.podTemplate.byNamespace.a.allowedNodes"),
    ("submit: {podTemplate: {byNamespace: {a: [x]}}}", "submit.podTemplate.byNamespace.a"),
])
def test_errors_name_file_and_key(tmp_path: Path, text: str, key: str) -> None:
    path = write(tmp_path, text)
    with pytest.raises(config.ConfigError) as caught:
        config.load(path)
    assert str(caught.value).startswith(f"{path}: {key}:")


def test_broken_yaml_names_the_line(tmp_path: Path) -> None:
    with pytest.raises(config.ConfigError, match=r"c.yaml: line 2: not valid YAML"):
        config.load(write(tmp_path, "a: 1\nb: ]\n"))


@given(value=st.one_of(st.integers(), st.text(max_size=5), st.booleans(),
                       st.lists(st.integers(), max_size=2)))
def test_any_value_is_accepted_or_named(value: object) -> None:
    """Random values for a key either load or fail with a ConfigError naming the key."""
    try:
        config.parse({"queue": {"backfillLimit": value}}, source="f.yaml", base=Path("."))
    except config.ConfigError as exc:
        assert str(exc).startswith("f.yaml: queue.backfillLimit:")


def test_pending_refresh_is_read_from_the_queue_section_and_named_when_wrong() -> None:
    assert config.parse({}, source="f.yaml", base=Path(".")).control.rules \
        .pending_refresh_s == 30.0
    read = config.parse({"queue": {"pendingRefresh": 5}}, source="f.yaml", base=Path("."))
    assert read.control.rules.pending_refresh_s == 5.0
    for junk in (-1, "soon", True):
        with pytest.raises(config.ConfigError, match=r"^f.yaml: queue.pendingRefresh: "):
            config.parse({"queue": {"pendingRefresh": junk}}, source="f.yaml", base=Path("."))
    with pytest.raises(ValueError, match=r"queue.pendingRefresh"):
        ControlSettings(rules=Rules(pending_refresh_s=-1))


@pytest.mark.parametrize("changes", [{"weaker_member_namespaces": "alow"},
                                     {"pod_security_floor": "strict"}])
def test_settings_refuse_an_unknown_pod_security_choice(changes: dict[str, str]) -> None:
    """Built directly (not from a file), a typo must not turn the namespace check off."""
    with pytest.raises(ValueError, match=r"weakerMemberNamespaces|podSecurityFloor"):
        ControlSettings(**changes)  # type: ignore[arg-type]
