"""Catalog: built-in loading, lookup, overriding, and the no-definition error."""

from __future__ import annotations

from pathlib import Path

import pytest

from dispatcher.workloads.catalog import Catalog
from dispatcher.workloads.errors import DefinitionError, NoDefinitionError
from dispatcher.workloads.resolve import demand_of, resolve, status_of

from .shapes import BATCHSET, BATCHSET_OBJ, TRAINRUN, edit


def test_builtin_catalog_loads_and_indexes_by_kind() -> None:
    catalog = Catalog.builtin()
    assert catalog is Catalog.builtin()  # loaded once, shared
    assert len(catalog) == len(catalog.definitions) > 0
    for gvk in catalog.kinds():
        found = catalog.find(gvk.api_version, gvk.kind)
        assert found is not None and found.gvk == gvk


def test_load_and_merge_later_overrides(tmp_path: Path) -> None:
    (tmp_path / "a.yaml").write_text(BATCHSET)
    (tmp_path / "b.yaml").write_text(TRAINRUN)
    mine = Catalog.load([tmp_path])
    assert [d.name for d in mine.definitions] == ["demo-batchset", "demo-trainrun"]
    renamed = tmp_path / "override" / "c.yaml"
    renamed.parent.mkdir()
    renamed.write_text(edit(BATCHSET, lambda d: d["metadata"].update(name="other")))
    merged = Catalog.merged(mine, Catalog.load([renamed]))
    found = merged.find("demo.example/v1", "BatchSet")
    assert found is not None and found.name == "other"
    assert merged.get("demo-batchset") is None


def test_load_reports_all_files(tmp_path: Path) -> None:
    (tmp_path / "a.yaml").write_text("apiVersion: v1\nkind: Pod\n")
    (tmp_path / "b.yaml").write_text("a: [")
    with pytest.raises(DefinitionError) as caught:
        Catalog.load([tmp_path])
    assert {Path(i.source).name for i in caught.value.issues} == {"a.yaml", "b.yaml"}


def test_no_definition_names_kind_and_loaded_definitions(tmp_path: Path) -> None:
    (tmp_path / "a.yaml").write_text(BATCHSET)
    catalog = Catalog.load([tmp_path])
    with pytest.raises(NoDefinitionError) as caught:
        resolve({"apiVersion": "x.io/v1", "kind": "Thing", "metadata": {"name": "t"}},
                catalog=catalog)
    message = str(caught.value)
    assert "'x.io/v1'" in message and "'Thing'" in message and "demo-batchset" in message


def test_fast_helpers_agree_with_full_resolve(tmp_path: Path) -> None:
    (tmp_path / "a.yaml").write_text(BATCHSET)
    catalog = Catalog.load([tmp_path])
    full = resolve(BATCHSET_OBJ, catalog=catalog)
    assert demand_of(BATCHSET_OBJ, catalog=catalog) == full.demand
    assert status_of(BATCHSET_OBJ, catalog=catalog).statuses == full.statuses
    assert catalog.resolve(BATCHSET_OBJ).to_dict() == full.to_dict()


def test_two_definitions_for_one_kind_in_one_load_are_an_error(tmp_path: Path) -> None:
    (tmp_path / "a.yaml").write_text(BATCHSET)
    (tmp_path / "b.yaml").write_text(edit(BATCHSET, lambda d: d["metadata"].update(name="b")))
    with pytest.raises(DefinitionError, match="like definition demo-batchset"):
        Catalog.load([tmp_path])


def test_generic_status_is_its_string_in_json_yaml_and_comparisons() -> None:
    import json

    import yaml

    from dispatcher.workloads.model import GenericStatus

    assert [s.value for s in GenericStatus] == [
        "pending", "initializing", "running", "degraded", "completed", "failed", "suspended",
        "unknown"]  # DESIGN.md's list, in its order
    data = {"status": GenericStatus.RUNNING, "statuses": [GenericStatus.FAILED]}
    assert json.dumps(data) == '{"status": "running", "statuses": ["failed"]}'
    assert yaml.safe_dump(data) == "status: running\nstatuses:\n- failed\n"
    assert GenericStatus.COMPLETED == "completed" and "unknown" in {GenericStatus.UNKNOWN}
