"""The layers of the package, enforced: each import goes down the data flow, never up.

    cli, kubectl, __main__ > commands > shell > config > control > placement > fleet > workloads
    > kube, aiotasks, output, sources (the bottom)

``sim`` (virtual time) and ``devfleet`` (local control planes) are leaves: they may use the
layers below them (sim: up to control, devfleet: up to fleet), and only ``commands`` and
``cli`` import them, so the product core never depends on a simulator or a test fleet.
Imports inside functions count too. Read from the source text, so a violation fails here
before it can matter anywhere.

Two spelling rules ride along: a module is never imported through the package root
(``from dispatcher import config`` hides the edge from a reader grepping for
``dispatcher.config``; the layer check counts it anyway), and only ``dispatcher/kube/``
imports ``kubernetes_asyncio`` (every other layer talks to clusters through ``kube``, so
the library can be swapped or patched in one place).
"""

from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[2] / "dispatcher"
RANK = {"kube": 0, "aiotasks": 0, "output": 0, "sources": 0, "workloads": 1, "fleet": 2,
        "devfleet": 2.5, "placement": 3, "control": 4, "sim": 4.5, "config": 5, "shell": 6,
        "commands": 7, "cli": 8, "kubectl": 8, "__main__": 9, "__init__": 9}
LEAVES = {"sim", "devfleet"}
LEAF_USERS = {"commands", "cli"}
KUBE_LIBRARY = "kubernetes_asyncio"


def _layer(module: str) -> str:
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else "__init__"


def _is_module(name: str) -> bool:
    """Whether ``dispatcher.<name>`` is a module or subpackage (not an attribute of the
    root, such as ``__version__``)."""
    return (PACKAGE / f"{name}.py").is_file() or (PACKAGE / name / "__init__.py").is_file()


def _imported(tree: ast.AST) -> Iterator[tuple[str, int]]:
    """(module, line) of every absolute import in ``tree``, function-local ones included;
    ``from dispatcher import x`` names the module ``dispatcher.x`` when x is one."""
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                yield alias.name, node.lineno
        elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
            if node.module == "dispatcher":
                for alias in node.names:
                    yield (f"dispatcher.{alias.name}" if _is_module(alias.name)
                           else "dispatcher"), node.lineno
            else:
                yield node.module, node.lineno


def through_root(source: str) -> list[tuple[int, str]]:
    """(line, name) of each ``from dispatcher import <module>`` in ``source``."""
    return [(node.lineno, alias.name) for node in ast.walk(ast.parse(source))
            if isinstance(node, ast.ImportFrom) and node.module == "dispatcher"
            and not node.level for alias in node.names if _is_module(alias.name)]


def library_imports(source: str) -> list[int]:
    """Lines of ``source`` that import ``kubernetes_asyncio`` (or one of its modules)."""
    return [line for module, line in _imported(ast.parse(source))
            if module == KUBE_LIBRARY or module.startswith(f"{KUBE_LIBRARY}.")]


def _files() -> Iterator[tuple[Path, str]]:
    for path in sorted(PACKAGE.rglob("*.py")):
        yield path, path.read_text()


def _edges() -> set[tuple[str, str, str]]:
    edges = set()
    for path, text in _files():
        module = ".".join(path.relative_to(PACKAGE.parent).with_suffix("").parts)
        source = _layer(module.removesuffix(".__init__") if module.count(".") > 1
                        else module)
        for name, _ in _imported(ast.parse(text)):
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


def test_an_import_through_the_package_root_counts_as_an_edge() -> None:
    tree = ast.parse("def f():\n    from dispatcher import control, __version__\n")
    assert sorted(_imported(tree)) == [("dispatcher", 2), ("dispatcher.control", 2)]


def test_no_module_is_imported_through_the_package_root() -> None:
    assert through_root("from dispatcher import config as c, __version__\n") == [
        (1, "config")]
    assert through_root("import dispatcher.config as c\nfrom dispatcher.kube import watch\n"
                        "from dispatcher import __version__\n") == []
    wrong = [f"{path.relative_to(PACKAGE.parent)}:{line}: from dispatcher import {name}"
             for path, text in _files() for line, name in through_root(text)]
    assert wrong == [], "import dispatcher.<module> (or from dispatcher.<module> import ...)"


def test_only_kube_imports_kubernetes_asyncio() -> None:
    planted = ("import kubernetes_asyncio\nimport kubernetes_asyncio.client as c\n"
               "def f():\n    from kubernetes_asyncio.config import load\n"
               "import kubernetes_asyncio_extra\n")
    assert library_imports(planted) == [1, 2, 4]
    kube = PACKAGE / "kube"
    wrong = [f"{path.relative_to(PACKAGE.parent)}:{line}"
             for path, text in _files() if kube not in path.parents
             for line in library_imports(text)]
    assert wrong == []
    assert any(library_imports(text) for path, text in _files() if kube in path.parents), \
        "kube/ no longer imports the library: this test checks nothing"


CORE = PACKAGE / "control" / "core"
CORE_MODULE = "dispatcher.control.core"
IO_MODULES = ("dispatcher.kube.client", "dispatcher.kube.watch", "dispatcher.kube.connections",
              "asyncio", "aiohttp", KUBE_LIBRARY)
"""What a pure module never imports: the shell's client, watches and event loop."""


def shell_imports(source: str) -> list[tuple[int, str]]:
    """(line, module) of each import in ``source`` that reaches the control shell
    (``dispatcher.control`` outside ``core``) or I/O (``IO_MODULES``)."""
    found = []
    tree = ast.parse(source)
    named = [(f"{node.module}.{alias.name}", node.lineno) for node in ast.walk(tree)
             if isinstance(node, ast.ImportFrom) and node.module == "dispatcher.control"
             for alias in node.names]  # ``from dispatcher.control import reconcile``
    for module, line in [*(m for m in _imported(tree) if m[0] != "dispatcher.control"),
                         *named]:
        in_control = module == "dispatcher.control" or module.startswith("dispatcher.control.")
        in_core = module == CORE_MODULE or module.startswith(f"{CORE_MODULE}.")
        io = any(module == m or module.startswith(f"{m}.") for m in IO_MODULES)
        if (in_control and not in_core) or io:
            found.append((line, module))
    return sorted(found)


def test_the_pure_core_never_imports_the_shell() -> None:
    """``control/core`` decides on plain data: it imports no shell module of ``control``
    (caches, writers, the reconciler) and nothing that does I/O."""
    planted = ("from dispatcher.control.core import decide\nimport dispatcher.control.submit\n"
               "def f():\n    from dispatcher.control import reconcile\n"
               "from dispatcher.kube.client import KubeClient\nimport asyncio\n"
               "from dispatcher.workloads.model import Definition\n")
    assert shell_imports(planted) == [(2, "dispatcher.control.submit"),
                                      (4, "dispatcher.control.reconcile"),
                                      (5, "dispatcher.kube.client"), (6, "asyncio")]
    modules = sorted(CORE.glob("*.py"))
    assert len(modules) > 10, "control/core holds the pure modules"
    wrong = [f"{path.relative_to(PACKAGE.parent)}:{line}: imports {module}"
             for path in modules for line, module in shell_imports(path.read_text())]
    assert wrong == []
