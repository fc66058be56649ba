"""The modules mypyc compiles give the results of their Python sources, bit for bit.

``setup.py`` compiles the modules of ``simfl/engine/flows/`` listed in its ``NATIVE`` where it can;
``simfl.engine.flows._native`` runs the compiled modules only when all of them are there and were
built from the current sources. Here: the frames of every catalogue scenario with a network (the
fingerprints' cases, stars, hierarchies, graphs, edge servers, availability on shared links) and of
the shared-links benchmark's scenarios hash the same in this process and in a pure-Python one
(``SIMFL_PURE_PYTHON=1``); the tests that patch those modules' classes (which compiled classes do
not allow) pass in a pure-Python one; and the choice between the two builds follows its rules.
"""

from __future__ import annotations

import hashlib
import importlib.machinery
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from simfl.engine.flows import _native

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "analysis"))
sys.path.insert(0, str(ROOT / "analysis" / "perf"))
import fingerprints  # noqa: E402

compiled_only = pytest.mark.skipif(
    not _native.ACTIVE, reason=f"the compiled modules do not run here: {_native.WHY_PURE}"
)

_DIGESTS = """
import json, sys
sys.path[:0] = [sys.argv[1] + "/analysis", sys.argv[1] + "/analysis/perf"]
import fingerprints, links_throughput
from simfl import run
from simfl.engine.flows import _native
assert not _native.ACTIVE, _native.WHY_PURE
catalogue = fingerprints.catalogue()
out = {name: fingerprints.fingerprint_case(catalogue[name]) for name in json.loads(sys.argv[2])}
for kind, edges in (("star", 10), ("nested", 10), ("tight", 10), ("tight", 100)):
    scenario = links_throughput.scenario(100, 3, kind, edges=edges)
    res = run(scenario, progress=False, on_error="raise")
    digest = fingerprints.frame_digest
    out[f"{kind}{edges}"] = [digest(res.rounds), digest(res.clients)]
print(json.dumps(out))
"""


def _pure_env() -> dict[str, str]:
    return {**os.environ, "SIMFL_PURE_PYTHON": "1", "OMP_NUM_THREADS": "1"}


def _network_cases() -> list[str]:
    catalogue = fingerprints.catalogue()
    return [
        name
        for name, build in catalogue.items()
        if not name.startswith("neural") and build()[0].network is not None
    ]


@compiled_only
def test_compiled_modules_give_the_frames_of_their_python_sources() -> None:
    import links_throughput

    from simfl import run

    names = _network_cases()
    assert len(names) >= 10  # stars, hierarchies, graphs, edge servers, availability
    done = subprocess.run(
        [sys.executable, "-c", _DIGESTS, str(ROOT), json.dumps(names)],
        env=_pure_env(),
        capture_output=True,
        text=True,
        check=True,
    )
    pure = json.loads(done.stdout)
    catalogue = fingerprints.catalogue()
    for name in names:
        got = fingerprints.fingerprint_case(catalogue[name])
        assert (got["rounds"], got["clients"]) == (pure[name]["rounds"], pure[name]["clients"])
        assert got["n_jobs"] == pure[name]["n_jobs"] > 0
    # and the benchmark's: a star, a cloud that does not bind, one that binds (its edges follow)
    for kind, edges in (("star", 10), ("nested", 10), ("tight", 10), ("tight", 100)):
        scenario = links_throughput.scenario(100, 3, kind, edges=edges)
        res = run(scenario, progress=False, on_error="raise")
        digests = [fingerprints.frame_digest(res.rounds), fingerprints.frame_digest(res.clients)]
        assert digests == pure[f"{kind}{edges}"]


def _patching_tests() -> list[str]:
    """The test files holding tests marked ``pure_python`` (they patch compiled classes)."""
    return sorted(
        str(path.relative_to(ROOT))
        for path in (ROOT / "tests").glob("test_*.py")
        if path.name != Path(__file__).name and "mark.pure_python" in path.read_text()
    )


def _pytest_on_the_sources(*args: str) -> str:
    """Run pytest on the Python sources (one process, no addopts); its summary line."""
    options = ["-q", "-n", "0", "-p", "no:cacheprovider", "-o", "addopts="]
    done = subprocess.run(
        [sys.executable, "-m", "pytest", *options, *args],
        cwd=ROOT,
        env=_pure_env(),
        capture_output=True,
        text=True,
    )
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-2000:]
    return done.stdout.strip().splitlines()[-1]


@compiled_only
def test_the_tests_that_patch_compiled_classes_and_the_doctests_pass_on_the_sources() -> None:
    files = _patching_tests()
    marked = sum((ROOT / f).read_text().count("@pytest.mark.pure_python") for f in files)
    assert len(files) >= 2 and marked >= 5
    last = _pytest_on_the_sources("-m", "pure_python", *files)
    assert last.startswith(f"{marked} passed") and "skipped" not in last, last
    # the compiled modules' doctests (root conftest.py leaves them out where they are compiled)
    sources = [m.replace(".", "/") + ".py" for m in _native.MODULES]
    with_examples = sum(">>> " in (ROOT / s).read_text() for s in sources)
    assert with_examples >= 1
    last = _pytest_on_the_sources("--doctest-modules", *sources)
    assert last.startswith(f"{with_examples} passed") and "skipped" not in last, last


def test_pure_python_is_chosen_by_the_environment_variable() -> None:
    done = subprocess.run(
        [
            sys.executable,
            "-c",
            "import simfl.engine.flows._native as n, simfl.engine.flows.sharedlink as s,"
            "simfl.engine.flows.flowround as f;"
            "print(n.ACTIVE, n.WHY_PURE, s.__file__, f.__file__)",
        ],
        env=_pure_env(),
        capture_output=True,
        text=True,
        check=True,
    )
    active, *_, sharing, flowround = done.stdout.split()
    assert active == "False" and "SIMFL_PURE_PYTHON is set" in done.stdout
    assert sharing.endswith("sharedlink.py") and flowround.endswith("flowround.py")


def _fake_build(root: Path, *, compiled: bool = True, record: bool = True) -> None:
    suffix = importlib.machinery.EXTENSION_SUFFIXES[0]
    lines = []
    for name in _native.MODULES:
        source = root / (name.replace(".", "/") + ".py")
        source.parent.mkdir(parents=True, exist_ok=True)
        source.write_text(f"# {name}\n")
        if compiled:
            source.with_suffix(suffix).write_bytes(b"")
        digest = hashlib.sha256(source.read_bytes()).hexdigest()
        lines.append(f"{digest} {source.relative_to(root).as_posix()}\n")
    if record:
        (root / _native.RECORD).write_text("".join(lines))


def test_the_compiled_modules_run_only_when_built_from_the_current_sources(tmp_path) -> None:
    env: dict[str, str] = {}
    _fake_build(tmp_path)
    assert _native.why_pure(tmp_path, env) is None
    assert _native.why_pure(tmp_path, {"SIMFL_PURE_PYTHON": "0"}) is None
    assert _native.why_pure(tmp_path, {"SIMFL_PURE_PYTHON": "1"}) == "SIMFL_PURE_PYTHON is set"
    edited = tmp_path / "simfl" / "engine" / "flows" / "links.py"
    edited.write_text(edited.read_text() + "# edited after the build\n")
    assert "simfl/engine/flows/links.py changed since it was compiled" in str(
        _native.why_pure(tmp_path, env)
    )
    _fake_build(tmp_path, record=False)
    (tmp_path / _native.RECORD).unlink()
    assert "_native_sources.txt is missing" in str(_native.why_pure(tmp_path, env))


def test_a_partial_or_missing_build_runs_the_python_sources(tmp_path) -> None:
    _fake_build(tmp_path, compiled=False)
    assert str(_native.why_pure(tmp_path, {})).startswith("not compiled")
    _fake_build(tmp_path)
    suffix = importlib.machinery.EXTENSION_SUFFIXES[0]
    (tmp_path / "simfl" / "engine" / "flows" / "flowround.py").with_suffix(suffix).unlink()
    assert _native.why_pure(tmp_path, {}) == "simfl/engine/flows/flowround.py was not compiled"
