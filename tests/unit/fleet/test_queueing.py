"""How a member queues (``fleet.queueing``): the declared forms and their errors, ``auto``
resolved by discovery, and the queue label a copy carries (declared queue, the hub's own
value only on a Kueue member, never elsewhere)."""

from __future__ import annotations

from pathlib import Path

import pytest

from dispatcher.config import ConfigError
from dispatcher.config import load as load_config
from dispatcher.fleet.fleetfile import FleetFileError, parse_fleet
from dispatcher.fleet.members import from_member_cluster
from dispatcher.fleet.queueing import AUTO, KUEUE, NONE, Queueing, parse

TEAM = Queueing(system=KUEUE, local_queue="shared", local_queues={"team-a": "team-a-q"})


def test_the_declared_forms() -> None:
    assert parse(None, where="q") == Queueing()
    assert parse({"system": "kueue", "localQueue": "lq"}, where="q") == \
        Queueing(system=KUEUE, local_queue="lq")
    assert parse({"localQueues": {"a": "qa"}}, where="q").local_queues == {"a": "qa"}
    assert parse({"system": "none"}, where="q").system == NONE


@pytest.mark.parametrize(("value", "message"), [
    ("kueue", "q: must be an object"),
    ({"system": "kai"}, "q.system: 'kai' is not one of auto, none, kueue"),
    ({"queue": "x"}, "q: unknown key(s) queue"),
    ({"localQueue": ""}, "q.localQueue: must be a LocalQueue name"),
    ({"localQueues": {"a": 3}}, "q.localQueues: must map namespaces to LocalQueue names"),
    ({"system": "none", "localQueue": "x"}, "q: system none takes no LocalQueue"),
])
def test_a_wrong_declaration_names_the_key(value: object, message: str) -> None:
    with pytest.raises(ValueError, match="^" + message.replace("(", r"\(").replace(")", r"\)")):
        parse(value, where="q")


def test_auto_is_what_the_member_serves() -> None:
    declared = Queueing(local_queue="lq")
    assert declared.effective(discovered=True) == Queueing(system=KUEUE, local_queue="lq")
    assert declared.effective(discovered=False).system == NONE
    assert declared.effective(discovered=None).system == NONE  # not asked yet
    assert Queueing(system=NONE).effective(discovered=True).system == NONE  # the operator


def test_the_label_a_copy_carries() -> None:
    assert TEAM.label("team-a", "hub-q") == "team-a-q"  # declared per namespace
    assert TEAM.label("team-b", "hub-q") == "shared"  # declared for the others
    kueue = Queueing(system=KUEUE)
    assert kueue.label("team-b", "hub-q") == "hub-q"  # a fleet that names queues alike
    assert kueue.label("team-b", None) is None  # the member's LocalQueue defaulting
    assert Queueing(system=NONE).label("team-a", "hub-q") is None  # never leaks
    assert Queueing(system=AUTO, local_queue="x").label("team-a", "hub-q") is None


def test_a_member_says_it_in_a_table_cell() -> None:
    assert TEAM.describe() == "kueue(1 namespaces, else shared)"
    assert Queueing(system=KUEUE, local_queue="lq").describe() == "kueue:lq"
    assert Queueing(system=NONE).describe() == "none"
    assert TEAM.to_dict() == {"system": "kueue", "localQueue": "shared",
                              "localQueues": {"team-a": "team-a-q"}}


def test_a_membercluster_declares_it_in_its_spec() -> None:
    obj = {"metadata": {"name": "m1"}, "spec": {"kubeconfigSecretRef": {"name": "s"},
                                                "queueing": {"system": "kueue",
                                                             "localQueue": "lq"}}}
    assert from_member_cluster(obj).queueing == Queueing(system=KUEUE, local_queue="lq")
    obj["spec"]["queueing"] = {"system": "slurm"}
    with pytest.raises(ValueError, match=r"MemberCluster m1: spec\.queueing\.system: 'slurm'"):
        from_member_cluster(obj)


def test_a_fleet_file_member_declares_it() -> None:
    fleet = parse_fleet({"members": [{"name": "m1", "queueing": {"system": "kueue"}}]},
                        source="f.yaml")
    assert fleet.members[0].queueing.system == KUEUE
    with pytest.raises(FleetFileError, match=r"f.yaml: members\[0\].queueing: unknown key"):
        parse_fleet({"members": [{"name": "m1", "queueing": {"lq": "x"}}]}, source="f.yaml")


def test_a_static_member_declares_it_and_a_wrong_one_names_key_and_file(tmp_path: Path
                                                                         ) -> None:
    path = tmp_path / "c.yaml"
    path.write_text("fleet:\n  staticMembers:\n  - name: m1\n    kubeconfig: k\n"
                    "    queueing: {system: kueue, localQueues: {team-a: qa}}\n")
    (member,) = load_config(str(path)).fleet.static_members
    assert member.queueing.queue_for("team-a") == "qa"
    path.write_text("fleet:\n  staticMembers:\n  - name: m1\n    kubeconfig: k\n"
                    "    queueing: {system: slurm}\n")
    with pytest.raises(ConfigError, match=rf"{path}: fleet.staticMembers\[0\]: "
                                          r"queueing.system: 'slurm'"):
        load_config(str(path))
