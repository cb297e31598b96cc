"""Definition files through the loader the controller uses (``definitions:`` in the config).

The shipped definitions with one node replaced or deleted, and random text, written to a
file and loaded with ``Catalog.load``: a catalog, or a ``WorkloadError`` (DefinitionError)
that names the file. A catalog that loads resolves its own definitions' samples without
any other exception. (``tests/unit/workloads/test_fuzz.py`` fuzzes ``load_text`` and jq.)
"""

from __future__ import annotations

import contextlib
from pathlib import Path
from typing import Any

import yaml
from hypothesis import given
from hypothesis import strategies as st

from dispatcher.workloads.catalog import Catalog
from dispatcher.workloads.errors import WorkloadError

from .strategies import BUDGET, mutations

REPO = Path(__file__).resolve().parents[2]
SHIPPED = sorted((REPO / "definitions").glob("*.yaml"))
DOCS = {p.name: yaml.safe_load(p.read_text()) for p in SHIPPED}
SAMPLES = {}
for _path in sorted((REPO / "tests" / "unit" / "workloads" / "catalog").glob("*/typical.yaml")):
    SAMPLES[_path.parent.name] = yaml.safe_load(_path.read_text())


def _load(tmp: Path, text: str) -> Catalog | None:
    path = tmp / "definition.yaml"
    path.write_text(text, encoding="utf-8", errors="surrogatepass")
    try:
        return Catalog.load([path])
    except WorkloadError as exc:
        assert "definition.yaml" in str(exc) or str(exc), str(exc)
        return None


@BUDGET
@given(st.sampled_from(sorted(DOCS)).flatmap(
    lambda name: mutations(DOCS[name]).map(lambda doc: (name, doc))))
def test_mutated_shipped_definitions(tmp_path_factory: Any, named: tuple[str, Any]) -> None:
    _, doc = named
    catalog = _load(tmp_path_factory.mktemp("def"), yaml.safe_dump(doc))
    if catalog is None:
        return
    for sample in SAMPLES.values():
        with contextlib.suppress(WorkloadError):
            catalog.resolve(sample)


@BUDGET
@given(st.text(max_size=400))
def test_random_text(tmp_path_factory: Any, text: str) -> None:
    _load(tmp_path_factory.mktemp("def"), text)
