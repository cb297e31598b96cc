"""Cluster selectors in Kubernetes string syntax: parse, match, round-trip, reject garbage."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from dispatcher.placement.selector import Requirement, Selector, SelectorError, parse_selector

LABELS = {"region": "eu-west", "tier": "training", "size": "8"}


@pytest.mark.parametrize(("text", "matches"), [
    ("", True),
    ("region=eu-west", True),
    ("region==eu-west", True),
    ("region=us-east", False),
    ("region!=us-east", True),
    ("missing!=x", True),
    ("region in (us-east, eu-west)", True),
    ("region notin (eu-west)", False),
    ("missing notin (a)", True),
    ("tier", True),
    ("!tier", False),
    ("!missing", True),
    ("size>4", True),
    ("size<4", False),
    ("region=eu-west,tier=batch", False),
    ("region = eu-west , tier in (training)", True),
])
def test_matches_like_kubernetes(text: str, matches: bool) -> None:
    assert parse_selector(text).matches(LABELS) is matches


@pytest.mark.parametrize("text", [
    "region=", "=eu", "region in eu", "region in ()", "region in (a", "a,,b", "a,",
    "region=eu west", "region=bad value!", "!", "a b", "x>y", "(a)",
])
def test_invalid_selectors_raise_with_the_text(text: str) -> None:
    if text == "region=":  # an empty value is valid: matches an empty label
        assert parse_selector(text).requirements == (Requirement("region", "=", ("",)),)
        return
    with pytest.raises(SelectorError, match="selector"):
        parse_selector(text)


names = st.from_regex(r"[a-z]([a-z0-9.-]{0,6}[a-z0-9])?", fullmatch=True)
requirements = st.one_of(
    st.builds(lambda k, v: Requirement(k, "=", (v,)), names, names),
    st.builds(lambda k, v: Requirement(k, "!=", (v,)), names, names),
    st.builds(lambda k, vs: Requirement(k, "in", tuple(sorted(set(vs)))), names,
              st.lists(names, min_size=1, max_size=3)),
    st.builds(lambda k, vs: Requirement(k, "notin", tuple(sorted(set(vs)))), names,
              st.lists(names, min_size=1, max_size=3)),
    st.builds(lambda k: Requirement(k, "exists"), names),
    st.builds(lambda k: Requirement(k, "!"), names),
)


@given(st.lists(requirements, max_size=4))
def test_string_form_round_trips(reqs: list[Requirement]) -> None:
    selector = Selector(tuple(reqs))
    assert parse_selector(str(selector)) == selector


@given(st.text(alphabet="abc=!,() inotx<>5-", max_size=20))
def test_garbage_is_parsed_or_rejected_never_crashes(text: str) -> None:
    try:
        selector = parse_selector(text)
    except SelectorError:
        return
    selector.matches(LABELS)
