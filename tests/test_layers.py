"""The package's import graph: no cycles, SimPy only in the engine, layers pointing one way.

Every ``import`` and ``from ... import`` in every module of ``simfl`` counts, wherever it is
written: at the top, inside a function (a lazy import) or under ``if TYPE_CHECKING:`` (a
type-only import). The layers, low to high (a module may import its own layer and lower ones):

    0 low        _checks, rng, dists, outcome
    1 world      fleet, network, server, tasks
    2 math       algorithms, neural, flower
    3 policies   policies
    4 run model  scenario, results
    5 engine     engine
    6 analysis   compare, plots, sweeps, report, tuning, twin
    7 interface  cli, and the package's own ``simfl/__init__.py``
"""

from __future__ import annotations

import ast
import io
import itertools
import re
import tokenize
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
    "server": 1,
    "tasks": 1,
    "algorithms": 2,
    "neural": 2,
    "flower": 2,
    "policies": 3,
    "scenario": 4,
    "results": 4,
    "engine": 5,
    "compare": 6,
    "plots": 6,
    "sweeps": 6,
    "tuning": 6,
    "report": 6,
    "twin": 6,
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
    # sweeps and report; at most about 10 top-level modules
    assert len(top) <= 10, top


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


# Private names of other libraries that simfl reads, each with why no public name does.
FOREIGN_PRIVATE_ALLOWED = {
    "os._exit": "documented API: leaves a forked child at once, without the parent's clean-up",
    "pool._processes": "concurrent.futures.ProcessPoolExecutor exposes no handle to its "
    "worker processes, and killing them is the only way to stop runs in flight at once",
    "torch._C": "the path to torch._C._functorch, below",
    "torch._C._functorch": "is_batchedtensor: torch has no public test for a tensor under vmap",
    "nn.modules.batchnorm._NormBase": "torch has no public base class of its batch and instance "
    "norm layers (lazy and sync variants included); FedBN's local layers are all of them",
    "nn.modules.instancenorm._InstanceNorm": "as _NormBase: the base of InstanceNorm1d/2d/3d "
    "and their lazy variants",
    "nn.modules.dropout._DropoutNd": "torch has no public base class of its dropout layers",
}


def _private_reads(path: Path) -> list[tuple[int, str]]:
    """``x._name`` reads (``x`` not ``self``/``cls``) of a ``_name`` the module does not define.

    Defined means a ``def``/``class`` of that name, a name assigned at any level, or an
    attribute assigned as ``self._name``/``cls._name``.
    """
    tree = ast.parse(path.read_text(), str(path))
    defined: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
            defined.add(node.name)
        elif isinstance(node, ast.Name) and isinstance(node.ctx, ast.Store):
            defined.add(node.id)
        elif (
            isinstance(node, ast.Attribute)
            and isinstance(node.ctx, ast.Store)
            and isinstance(node.value, ast.Name)
            and node.value.id in ("self", "cls")
        ):
            defined.add(node.attr)
    found = []
    for node in ast.walk(tree):
        if not isinstance(node, ast.Attribute):
            continue
        name = node.attr
        if not name.startswith("_") or name.startswith("__") or name in defined:
            continue
        if isinstance(node.value, ast.Name) and node.value.id in ("self", "cls"):
            continue
        found.append((node.lineno, ast.unparse(node)))
    return found


def test_no_module_reads_another_modules_private_members():
    bad = []
    for path in sorted(ROOT.rglob("*.py")):
        where = path.relative_to(ROOT.parent).as_posix()
        bad += [
            f"{where}:{line}: {text}"
            for line, text in _private_reads(path)
            if text not in FOREIGN_PRIVATE_ALLOWED
        ]
    assert not bad, "private members read from outside their module:\n" + "\n".join(bad)


def test_the_private_reads_scan_finds_them(tmp_path: Path):
    file = tmp_path / "m.py"
    file.write_text(
        "class A:\n"
        "    def __init__(self):\n"
        "        self._mine = 1\n"
        "    def same(self, other):\n"
        "        return other._mine + self._theirs + len(self.__dict__)\n"
        "def f(net, env):\n"
        "    env._now = 3\n"
        "    return net._free, net.inner._link\n"
    )
    assert _private_reads(file) == [(7, "env._now"), (8, "net._free"), (8, "net.inner._link")]


#: Words that tell history rather than what the code is: an issue, a stop, a machine.
HISTORY = re.compile(r"\bissue\s*#?\d+|\bstop\s+\d+|\b(epyc|xeon)\b", re.IGNORECASE)


#: a docs page's generated block: rendered from a results file by analysis/docs_tables.py (what
#: a measurement recorded, such as the machine it ran on, or a paper repository's issue it cites)
GENERATED = re.compile(r"^<!-- ([\w-]+):begin -->$(.*?)^<!-- \1:end -->$", re.MULTILINE | re.DOTALL)


def _history(text: str) -> list[tuple[int, str]]:
    return [
        (i, line.strip()) for i, line in enumerate(text.splitlines(), 1) if HISTORY.search(line)
    ]


def _page_history(text: str) -> list[tuple[int, str]]:
    """:func:`_history` of a docs page outside its generated blocks (lines keep their numbers)."""
    prose = GENERATED.sub(lambda m: "\n" * m.group(0).count("\n"), text)
    return _history(prose)


def _python_words(path: Path) -> list[tuple[int, str]]:
    """The lines of the comments and docstrings of a Python file that name history."""
    source = path.read_text()
    found = [
        (tok.start[0], tok.string)
        for tok in tokenize.generate_tokens(io.StringIO(source).readline)
        if tok.type == tokenize.COMMENT and HISTORY.search(tok.string)
    ]
    for node in ast.walk(ast.parse(source, str(path))):
        if isinstance(node, ast.Module | ast.ClassDef | ast.FunctionDef | ast.AsyncFunctionDef):
            doc = node.body[0] if node.body else None
            if (
                isinstance(doc, ast.Expr)
                and isinstance(doc.value, ast.Constant)
                and isinstance(doc.value.value, str)
            ):
                found += [(doc.lineno + i - 1, line) for i, line in _history(doc.value.value)]
    # attribute docstrings (a string right after an assignment) and #: comments count too
    for node in ast.walk(ast.parse(source, str(path))):
        for body in (getattr(node, "body", None), getattr(node, "orelse", None)):
            if not isinstance(body, list):
                continue
            for before, after in itertools.pairwise(body):
                if (
                    isinstance(before, ast.Assign | ast.AnnAssign)
                    and isinstance(after, ast.Expr)
                    and isinstance(after.value, ast.Constant)
                    and isinstance(after.value.value, str)
                ):
                    found += [
                        (after.lineno + i - 1, line) for i, line in _history(after.value.value)
                    ]
    return sorted(set(found))


def test_no_comment_or_docstring_names_an_issue_a_stop_or_a_machine():
    docs = ROOT.parent / "docs"
    bad = []
    for path in sorted(ROOT.rglob("*.py")):
        where = path.relative_to(ROOT.parent).as_posix()
        bad += [f"{where}:{line}: {text}" for line, text in _python_words(path)]
    for path in sorted(docs.glob("*.md")):
        where = path.relative_to(ROOT.parent).as_posix()
        bad += [f"{where}:{line}: {text}" for line, text in _page_history(path.read_text())]
    assert not bad, "history in comments, docstrings or docs (it goes to CHANGELOG.md):\n" + (
        "\n".join(bad)
    )


def test_the_history_scan_finds_it(tmp_path: Path):
    file = tmp_path / "m.py"
    file.write_text(
        '"""Faster since issue 13."""\n'
        "X = 1  # measured on the EPYC\n"
        "def f():\n"
        '    """Stop 29 moved this here."""\n'
        'LIMIT = "issue 4 is data, not a comment"\n'
        "def g():\n"
        '    """Issue a stop signal; 2 stops."""\n'
    )
    assert [line for line, _ in _python_words(file)] == [1, 2, 4]


def test_the_page_scan_skips_only_generated_blocks():
    page = (
        "Faster since stop 29.\n"
        "<!-- perf:begin -->\n"
        "Measured on: AMD EPYC\n"
        "<!-- perf:end -->\n"
        "The Xeon was slower.\n"
    )
    assert [line for line, _ in _page_history(page)] == [1, 5]


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
