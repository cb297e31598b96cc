"""Who answers for a broken bound (``workloads.quarantine``): plain data and times."""

from __future__ import annotations

from dispatcher.workloads.quarantine import (
    Hit,
    QuarantineBook,
    QuarantineRule,
    Strike,
    Subject,
    definition_breaks,
)

CPU = Hit(bound="cpu", detail="more than 2 s of CPU")
RULE = QuarantineRule(objects=3, namespaces=2, window_seconds=3600)


def _subject(namespace: str, name: str, version: str = "1") -> Subject:
    return Subject(namespace=namespace, name=name, uid=f"uid-{name}", version=version)


def _strike(namespace: str, name: str, at: float) -> Strike:
    return Strike(namespace=namespace, object=(namespace, name), at=at, hit=CPU)


def test_three_objects_from_two_namespaces_break_the_definition() -> None:
    strikes = [_strike("a", "x", 0), _strike("a", "y", 10), _strike("b", "z", 20)]
    assert definition_breaks(strikes, rule=RULE, now=30)


def test_one_namespace_never_breaks_the_definition() -> None:
    strikes = [_strike("a", f"x{i}", i) for i in range(50)]
    assert not definition_breaks(strikes, rule=RULE, now=60)


def test_two_objects_are_not_enough() -> None:
    assert not definition_breaks([_strike("a", "x", 0), _strike("b", "y", 0)], rule=RULE,
                                 now=1)


def test_strikes_older_than_the_window_do_not_count() -> None:
    strikes = [_strike("a", "x", 0), _strike("a", "y", 10), _strike("b", "z", 4000)]
    assert not definition_breaks(strikes, rule=RULE, now=4000)


def test_the_object_is_quarantined_at_its_version_only() -> None:
    book = QuarantineBook(RULE)
    assert not book.hit("def", _subject("a", "x"), CPU, now=0)
    assert book.of_object("def", _subject("a", "x")) == CPU
    assert book.of_object("def", _subject("a", "x", version="2")) is None  # it changed
    assert book.of_object("def", _subject("a", "y")) is None  # its neighbour
    assert book.of_object("other-def", _subject("a", "x")) is None
    assert book.of_definition("def") is None
    book.cleared("def", _subject("a", "x", version="2"))  # evaluated fine once changed
    assert book.of_object("def", _subject("a", "x")) is None


def test_the_same_object_hit_again_counts_once() -> None:
    book = QuarantineBook(RULE)
    for version in ("1", "2", "3"):
        assert not book.hit("def", _subject("a", "x", version), CPU, now=0)
    assert not book.hit("def", _subject("b", "y"), CPU, now=1)
    assert book.of_definition("def") is None
    assert book.hit("def", _subject("b", "z"), CPU, now=2)  # the third object
    assert book.of_definition("def") == CPU
    assert not book.hit("def", _subject("c", "w"), CPU, now=3)  # already: not news


def test_a_hub_object_and_its_copy_are_one_object() -> None:
    hub = Subject(namespace="a", name="x", uid="hub-uid", version="1")
    copy = Subject(namespace="a", name="x", uid="member-uid", version="7")
    assert hub.object == copy.object


def test_objects_without_a_resource_version_are_known_by_content() -> None:
    one = Subject.of({"metadata": {"name": "x"}, "spec": {"a": 1}})
    same = Subject.of({"spec": {"a": 1}, "metadata": {"name": "x"}})
    other = Subject.of({"metadata": {"name": "x"}, "spec": {"a": 2}})
    assert one.version == same.version != other.version
    assert Subject.of({"metadata": {"name": "x", "resourceVersion": "42"}}).version == "42"
