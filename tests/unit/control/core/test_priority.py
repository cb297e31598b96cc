"""PriorityPolicy: the annotation honoured up to the namespace's cap; junk is an error.

Covered: default, cap (global and per namespace), range, junk values (table and fuzz),
config validation naming the file and the key. Left out: the shell (integration tests).
"""

from __future__ import annotations

from pathlib import Path
from types import MappingProxyType

import pytest
from hypothesis import given
from hypothesis import strategies as st

from dispatcher.config import ConfigError, parse
from dispatcher.control.core.priority import PRIORITY_LIMIT, InvalidPriority, PriorityPolicy

POLICY = PriorityPolicy(default=0, max=10, max_by_namespace=MappingProxyType(
    {"team-a": 100, "batch": -5}))


def ann(value: str) -> dict[str, str]:
    return {"dispatcher.io/priority": value}


@pytest.mark.parametrize(("annotations", "namespace", "want"), [
    (None, "team-b", 0),                      # default
    (ann("7"), "team-b", 7),
    (ann("1000000000"), "team-b", 10),        # clamped to the global cap
    (ann("1000000000"), "team-a", 100),       # clamped to the namespace's cap
    (ann("50"), "team-a", 50),
    (ann("-20"), "team-b", -20),              # lowering is always allowed
    (ann(" +3 "), "team-b", 3),
    (None, "batch", -5),                      # a namespace capped below the default
    (ann(str(-PRIORITY_LIMIT)), "team-b", -PRIORITY_LIMIT),
])
def test_priority(annotations: dict[str, str] | None, namespace: str, want: int) -> None:
    assert POLICY.of(annotations, namespace) == want


@pytest.mark.parametrize("value", ["x", "", "1.5", "1e3", "0x10", "1000000001",
                                   "-1000000001", "9" * 4000, "١٢"])
def test_junk_is_an_error_not_zero(value: str) -> None:
    with pytest.raises(InvalidPriority) as err:
        POLICY.of(ann(value), "team-a")
    message = str(err.value)
    assert message.startswith("invalid annotation ")  # condition reason InvalidAnnotation
    assert "not dispatched until it is fixed" in message
    assert len(message) < 400  # a 4,000-digit value is not echoed whole


@given(st.text(max_size=30))
def test_any_text_is_a_capped_int_or_an_error(text: str) -> None:
    try:
        value = POLICY.of(ann(text), "team-a")
    except InvalidPriority:
        return
    assert -PRIORITY_LIMIT <= value <= 100


@pytest.mark.parametrize(("queue", "key"), [
    ({"priority": {"default": "high"}}, "queue.priority.default"),
    ({"priority": {"max": 10**12}}, "queue.priority.max"),
    ({"priority": {"maxByNamespace": {"team-a": "lots"}}}, "queue.priority.maxByNamespace.team-a"),
    ({"priority": {"maxByNamespace": ["team-a"]}}, "queue.priority.maxByNamespace"),
    ({"priority": {"cap": 1}}, "queue.priority.cap"),
])
def test_config_errors_name_file_and_key(queue: dict[str, object], key: str) -> None:
    with pytest.raises(ConfigError) as err:
        parse({"queue": queue}, source="cfg.yaml", base=Path("."))
    assert str(err.value).startswith(f"cfg.yaml: {key}:")


def test_config_reads_the_policy() -> None:
    config = parse({"queue": {"priority": {"default": 1, "max": 5,
                                           "maxByNamespace": {"team-a": 100}}}},
                   source="cfg.yaml", base=Path("."))
    policy = config.control.priority
    assert (policy.default, policy.max, dict(policy.max_by_namespace)) == (1, 5,
                                                                          {"team-a": 100})
    assert parse({}, source="x", base=Path(".")).control.priority == PriorityPolicy()
