"""The controller's ``mode`` and ``multiKueue`` keys: read, defaulted, refused by name."""

from __future__ import annotations

from pathlib import Path

import pytest

import dispatcher.config as configmod


def test_the_default_is_to_dispatch_with_a_five_minute_admit_bound() -> None:
    config = configmod.parse({}, source="x.yaml", base=Path("."))
    assert config.control.mode == "dispatch"
    assert config.control.multikueue_admit_within_s == 300.0


def test_multikueue_dispatcher_mode_and_its_bound() -> None:
    config = configmod.parse({"mode": "multikueue-dispatcher",
                              "multiKueue": {"admitWithin": 60}},
                             source="x.yaml", base=Path("."))
    assert (config.control.mode, config.control.multikueue_admit_within_s) == (
        "multikueue-dispatcher", 60.0)


@pytest.mark.parametrize(("data", "key"), [
    ({"mode": "kueue"}, "mode"),
    ({"multiKueue": {"admitWithin": -1}}, "multiKueue.admitWithin"),
    ({"multiKueue": {"dispatcherName": "x"}}, "multiKueue.dispatcherName"),
])
def test_a_bad_value_names_its_key_and_file(data: dict[str, object], key: str) -> None:
    with pytest.raises(configmod.ConfigError) as caught:
        configmod.parse(data, source="x.yaml", base=Path("."))
    assert "x.yaml" in str(caught.value) and key in str(caught.value), caught.value
