"""The layers of the package, enforced: each import goes down the data flow, never up.

    cli, kubectl, __main__ > commands > shell > config > control > placement > fleet > workloads
    > kube, aiotasks, output, sources (the bottom)

``sim`` (virtual time) and ``devfleet`` (local control planes) are leaves: they may use the
layers below them (sim: up to control, devfleet: up to fleet), and only ``commands`` and
``cli`` import them, so the product core never depends on a simulator or a test fleet.
Imports inside functions count too. Read from the source text, so a violation fails here
before it can matter anywhere.
"""

from __future__ import annotations

import ast
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[2] / "dispatcher"
RANK = {"kube": 0, "aiotasks": 0, "output": 0, "sources": 0, "workloads": 1, "fleet": 2,
        "devfleet": 2.5, "placement": 3, "control": 4, "sim": 4.5, "config": 5, "shell": 6,
        "commands": 7, "cli": 8, "kubectl": 8, "__main__": 9, "__init__": 9}
LEAVES = {"sim", "devfleet"}
LEAF_USERS = {"commands", "cli"}


def _layer(module: str) -> str:
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else "__init__"


def _edges() -> set[tuple[str, str, str]]:
    edges = set()
    for path in PACKAGE.rglob("*.py"):
        module = ".".join(path.relative_to(PACKAGE.parent).with_suffix("").parts)
        source = _layer(module.removesuffix(".__init__") if module.count(".") > 1
                        else module)
        for node in ast.walk(ast.parse(path.read_text())):
            names = ([node.module] if isinstance(node, ast.ImportFrom) and node.module
                     else [a.name for a in node.names] if isinstance(node, ast.Import)
                     else [])
            for name in names:
                if name.startswith("dispatcher."):
                    target = _layer(name)
                    if target != source:
                        edges.add((source, target, str(path.relative_to(PACKAGE.parent))))
    return edges


def test_every_layer_is_known() -> None:
    known = set(RANK)
    found = {_layer(".".join(p.relative_to(PACKAGE.parent).with_suffix("").parts))
             for p in PACKAGE.rglob("*.py")}
    assert found <= known, f"new top-level module(s) without a layer: {found - known}"


def test_imports_go_down_the_layers() -> None:
    wrong = sorted(f"{where}: {source} imports {target}"
                   for source, target, where in _edges()
                   if (target in LEAVES and source not in LEAF_USERS)
                   or RANK[target] > RANK[source])
    assert wrong == []
