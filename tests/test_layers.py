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
    "_native": 0,  # which build of the compiled modules runs (imports nothing of simfl)
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


#: Where playbacks live, and the one module that picks one for a run.
PLAYBACKS = "simfl.engine.playbacks"
CHOOSER = "simfl.engine.playbacks.choose"
#: Attributes that once chose a playback outside the table (read nowhere any more).
PLAYBACK_FLAGS = {"batched", "resolved", "flow_rounds", "planned"}


def _playback_classes(modules: dict[str, Path]) -> set[str]:
    """The names of ``Playback`` and of every class of simfl deriving from it."""
    bases: dict[str, set[str]] = {}
    for path in modules.values():
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ClassDef):
                bases.setdefault(node.name, set()).update(
                    b.id if isinstance(b, ast.Name) else b.attr
                    for b in node.bases
                    if isinstance(b, ast.Name | ast.Attribute)
                )
    found = {"Playback"}
    while True:
        more = {c for c, bs in bases.items() if bs & found} - found
        if not more:
            return found
        found |= more


def playback_choice_violations(root: Path) -> list[str]:
    """Where simfl under ``root`` chooses or tells apart playbacks outside the table.

    A playback class may be instantiated only in :data:`CHOOSER`; no module outside
    :data:`PLAYBACKS` may test a playback's type (``isinstance``/``type(...) is``) or read one
    of :data:`PLAYBACK_FLAGS` as an attribute.
    """
    modules = {
        ".".join(("simfl", *p.relative_to(root).with_suffix("").parts)): p
        for p in sorted(root.rglob("*.py"))
    }
    classes = _playback_classes(modules)
    concrete = classes - {"Playback"}
    bad: list[str] = []

    def ident(node: ast.AST) -> str | None:
        if isinstance(node, ast.Name):
            return node.id
        return node.attr if isinstance(node, ast.Attribute) else None

    for name, path in modules.items():
        inside = name.startswith(PLAYBACKS)
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Call):
                called = ident(node.func)
                if called in concrete and not name.startswith(CHOOSER):
                    bad.append(f"{name}: instantiates {called}")
                if called == "isinstance" and not inside and len(node.args) == 2:
                    kinds = node.args[1]
                    named = kinds.elts if isinstance(kinds, ast.Tuple) else [kinds]
                    hit = [ident(k) for k in named if ident(k) in classes]
                    if hit:
                        bad.append(f"{name}: isinstance(..., {hit})")
            elif isinstance(node, ast.Compare) and not inside:
                hit = [ident(c) for c in node.comparators if ident(c) in classes]
                if hit and any(isinstance(op, ast.Is | ast.IsNot | ast.Eq) for op in node.ops):
                    bad.append(f"{name}: compares a type with {hit}")
            elif (
                isinstance(node, ast.Attribute)
                and isinstance(node.ctx, ast.Load)
                and node.attr in PLAYBACK_FLAGS
                and not inside
            ):
                bad.append(f"{name}: reads .{node.attr}")
    return bad


def test_the_playback_is_chosen_in_one_module():
    """Playbacks are built only by the table's module; nothing else tells them apart."""
    assert playback_choice_violations(ROOT) == []
    assert {"PlannedPlayback", "ReferencePlayback"} <= _playback_classes(_modules())
