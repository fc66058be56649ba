"""The package's import graph: no cycles, SimPy only in the engine, layers pointing one way.

Every ``import`` and ``from ... import`` in every module of ``simfl`` counts, wherever it is
written: at the top, inside a function (a lazy import) or under ``if TYPE_CHECKING:`` (a
type-only import). The layers, low to high (a module may import its own layer and lower ones):

    0 low        _checks, rng, dists, outcome
    1 world      fleet, network, tasks (and the README-era re-exports availability, topology,
                 traces)
    2 math       algorithms, neural
    3 policies   policies
    4 run model  scenario, results
    5 engine     engine
    6 analysis   compare, plots, sweeps, report, tuning
    7 interface  cli, and the package's own ``simfl/__init__.py``
"""

from __future__ import annotations

import ast
from pathlib import Path

import networkx as nx
import pytest

ROOT = Path(__file__).resolve().parents[1] / "simfl"

LAYERS = {
    "_checks": 0,
    "rng": 0,
    "dists": 0,
    "outcome": 0,
    "fleet": 1,
    "network": 1,
    "tasks": 1,
    "availability": 1,
    "topology": 1,
    "traces": 1,
    "algorithms": 2,
    "neural": 2,
    "policies": 3,
    "scenario": 4,
    "results": 4,
    "engine": 5,
    "compare": 6,
    "plots": 6,
    "sweeps": 6,
    "tuning": 6,
    "report": 6,
    "cli": 7,
    "": 7,  # simfl/__init__.py
}


def _module_name(path: Path) -> str:
    parts = ("simfl", *path.relative_to(ROOT).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _modules() -> dict[str, Path]:
    return {_module_name(p): p for p in sorted(ROOT.rglob("*.py"))}


def _imports(name: str, path: Path, known: set[str]) -> set[str]:
    """Every module (of simfl or outside) that ``name`` imports, anywhere in its source."""
    tree = ast.parse(path.read_text(), str(path))
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    found: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")
                base = base[: len(base) - node.level + 1]
                mod = ".".join([*base, node.module] if node.module else base)
            else:
                mod = node.module or ""
            for alias in node.names:
                sub = f"{mod}.{alias.name}"
                found.add(sub if sub in known else mod)
    return found


def _graph() -> tuple[nx.DiGraph[str], dict[str, set[str]]]:
    modules = _modules()
    known = set(modules)
    graph: nx.DiGraph[str] = nx.DiGraph()
    external: dict[str, set[str]] = {}
    for name, path in modules.items():
        graph.add_node(name)
        imported = _imports(name, path, known)
        external[name] = {m for m in imported if m.split(".")[0] != "simfl"}
        for target in imported:
            if target in known and target != name:
                graph.add_edge(name, target)
    return graph, external


def _layer(module: str) -> int:
    parts = module.split(".")
    key = parts[1] if len(parts) > 1 else ""
    if key not in LAYERS:
        pytest.fail(f"{module} belongs to no layer: add its top-level name to LAYERS")
    return LAYERS[key]


GRAPH, EXTERNAL = _graph()


def test_the_graph_was_read():
    assert GRAPH.number_of_nodes() > 40 and GRAPH.number_of_edges() > 100
    assert GRAPH.has_edge("simfl.engine", "simfl.engine.context")
    assert "simpy" in EXTERNAL["simfl.engine.context"]


def test_no_import_cycles_type_only_and_lazy_imports_included():
    cycles = list(nx.simple_cycles(GRAPH))
    assert not cycles, "import cycles: " + "; ".join(" -> ".join(c + c[:1]) for c in cycles[:5])


def test_simpy_only_under_the_engine():
    users = sorted(m for m, ext in EXTERNAL.items() if any(e.split(".")[0] == "simpy" for e in ext))
    assert users and all(m.startswith("simfl.engine") for m in users), users


def test_policies_import_nothing_from_the_engine():
    bad = [
        (a, b)
        for a, b in GRAPH.edges
        if a.startswith("simfl.policies") and b.startswith("simfl.engine")
    ]
    assert not bad, bad


@pytest.mark.parametrize("module", sorted(GRAPH.nodes))
def test_layers_point_one_way(module: str):
    mine = _layer(module)
    upward = [t for t in GRAPH.successors(module) if _layer(t) > mine]
    assert not upward, f"{module} (layer {mine}) imports higher layers: {upward}"


def test_top_level_stays_small():
    top = sorted(p.name for p in ROOT.glob("*.py"))
    # the layout: subpackages for fleet, network, engine, policies, algorithms, tasks, neural,
    # sweeps and report; at most about 12 top-level modules (three of them README re-exports)
    assert len(top) <= 13, top


def test_the_engine_knows_policy_families_not_policies():
    """No concrete policy is a special case of the engine: it imports only the policy API."""
    api = {"Policy", "SyncPolicy", "EdgePolicy", "TieredPolicy", "AsyncPolicy", "RoundPlan", "View"}
    concrete = set(__import__("simfl.policies", fromlist=["__all__"]).__all__) - api
    for name, path in _modules().items():
        if not name.startswith("simfl.engine"):
            continue
        tree = ast.parse(path.read_text())
        for node in ast.walk(tree):
            if isinstance(node, ast.ImportFrom) and (node.module or "").startswith("simfl.polic"):
                assert node.module == "simfl.policies.base", (name, node.module)
                assert {a.name for a in node.names} <= api, (name, [a.name for a in node.names])
            if isinstance(node, ast.Name | ast.Attribute):
                ident = node.id if isinstance(node, ast.Name) else node.attr
                assert ident not in concrete, (name, ident)


def _compiled_in_setup() -> list[str]:
    """The modules ``setup.py`` compiles (its ``NATIVE``, read without running it)."""
    tree = ast.parse((ROOT.parent / "setup.py").read_text())
    for node in tree.body:
        target = node.target if isinstance(node, ast.AnnAssign) else None
        if isinstance(node, ast.Assign) and len(node.targets) == 1:
            target = node.targets[0]
        if isinstance(target, ast.Name) and target.id == "NATIVE":
            assert node.value is not None
            return list(ast.literal_eval(node.value))
    pytest.fail("setup.py defines no NATIVE")


def test_mypyc_compiled_modules_live_in_one_package():
    from simfl.engine.flows import _native

    package = "simfl.engine.flows"
    built = [p.removesuffix(".py").replace("/", ".") for p in _compiled_in_setup()]
    assert built == list(_native.MODULES)  # setup.py and the run-time choice agree
    assert built and all(m.rpartition(".")[0] == package for m in built), built
    assert all(m in GRAPH for m in built)  # every one a module of the package
    # the choice is made in the package, before any compiled module is imported
    assert "_native" not in {p.stem for p in ROOT.glob("*.py")}
    init = (ROOT / "engine" / "flows" / "__init__.py").read_text()
    first = next(n for n in ast.parse(init).body if isinstance(n, ast.Import | ast.ImportFrom))
    assert isinstance(first, ast.ImportFrom) and [a.name for a in first.names] == ["_native"]
