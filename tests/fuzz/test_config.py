"""Config files through ``dispatcher.config``: a Config or a ConfigError naming the file.

Inputs: random YAML documents, ``config/default.yaml`` and ``config/local.yaml`` with one
node replaced or deleted, random text as a file, and random ``--set`` overrides.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml
from hypothesis import given
from hypothesis import strategies as st

from dispatcher import config as configmod
from dispatcher.config import Config, ConfigError

from .strategies import BUDGET, json_values, mutations

REPO = Path(__file__).resolve().parents[2]
DEFAULT = yaml.safe_load((REPO / "config" / "default.yaml").read_text())
LOCAL = yaml.safe_load((REPO / "config" / "local.yaml").read_text())
SOURCE = "fuzz.yaml"


def _parse(data: Any) -> Config | None:
    try:
        return configmod.parse(data, source=SOURCE, base=REPO)
    except ConfigError as exc:
        assert str(exc).startswith(f"{SOURCE}: "), str(exc)
        return None


def test_the_shipped_files_are_valid() -> None:
    assert _parse(DEFAULT) is not None
    assert _parse(LOCAL) is not None


@BUDGET
@given(json_values)
def test_random_documents(data: Any) -> None:
    _parse(data)


@BUDGET
@given(mutations(DEFAULT))
def test_default_file_with_one_node_changed(data: Any) -> None:
    _parse(data)


@BUDGET
@given(mutations(LOCAL))
def test_local_file_with_one_node_changed(data: Any) -> None:
    _parse(data)


@BUDGET
@given(st.text(max_size=300) | st.binary(max_size=200).map(
    lambda b: b.decode("latin-1")))
def test_random_file_text(tmp_path_factory: Any, text: str) -> None:
    path = tmp_path_factory.mktemp("cfg") / "config.yaml"
    path.write_text(text, encoding="utf-8", errors="surrogatepass")
    try:
        configmod.load(path)
    except ConfigError as exc:
        assert str(exc).startswith(str(path)), str(exc)


@BUDGET
@given(st.lists(st.text(max_size=40) | st.sampled_from(
    ["workers=0", "workers=-1", "failover.policy=sometimes", "a.b.c=1", "=", "hubId=",
     "leaderElection.renewEvery=100", "fleet.staticMembers=[{}]", "server=3", "log.level=x"]),
    max_size=4))
def test_random_overrides(overrides: list[str]) -> None:
    try:
        configmod.load(None, overrides=overrides)
    except ConfigError as exc:
        message = str(exc)
        assert message.startswith(("<defaults>: ", "--set ")), message
