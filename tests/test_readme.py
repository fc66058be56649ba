"""What the README and the getting-started pages say matches what the code does."""

import re
import subprocess
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
README = (ROOT / "README.md").read_text()
DOCS = ROOT / "docs"


def test_python_example_runs(tmp_path, monkeypatch):
    block = re.search(r"## In Python\n\n```python\n(.*?)```", README, re.S)
    assert block is not None
    monkeypatch.chdir(tmp_path)
    namespace: dict[str, object] = {}
    exec(compile(block.group(1), "README.md", "exec"), namespace)
    res = namespace["res"]
    assert len(res.rounds) == 200 and res.final()["distance"] < 1e-3
    assert (tmp_path / "runs" / "fedrep" / "rounds.parquet").is_file()


def test_comparison_example_runs(tmp_path, monkeypatch):
    page = (DOCS / "getting-started.md").read_text()
    block = re.search(r"## A first comparison\n\n.*?```python\n(.*?)```", page, re.S)
    assert block is not None
    monkeypatch.chdir(tmp_path)
    namespace: dict[str, object] = {}
    exec(compile(block.group(1), "docs/getting-started.md", "exec"), namespace)
    frame = namespace["frame"]
    assert set(frame["policy"]) == {"fedrep", "srpfl"} and frame["seed"].nunique() == 5
    assert (tmp_path / "srpfl_vs_fedrep.png").stat().st_size > 10_000


def test_network_example_runs():
    page = (DOCS / "networks.md").read_text()
    block = re.search(r"# Networks and availability\n\n.*?```python\n(.*?)```", page, re.S)
    assert block is not None
    namespace: dict[str, object] = {}
    exec(compile(block.group(1), "docs/networks.md", "exec"), namespace)
    assert namespace["fleet"].availability.size == 200
    assert namespace["traced"].availability is not None


def test_ci_runs_the_two_readme_commands():
    for tag in ("main", "test"):
        line = subprocess.run(
            [
                "bash",
                "-c",
                f"source <(sed -n '/^readme_command()/,/^}}/p' .ci/run); readme_command {tag}",
            ],
            cwd=ROOT,
            capture_output=True,
            text=True,
            check=True,
        ).stdout.strip()
        assert line.startswith("python3 -m venv .venv") and line in README
    assert "simfl run scenarios/fedrep_linear.py" in README


def test_getting_started_shows_the_readme_example():
    page = (DOCS / "getting-started.md").read_text()
    readme = re.search(r"## In Python\n\n```python\n(.*?)```", README, re.S)
    first_run = re.search(r"## A first run\n\n.*?```python\n(.*?)```", page, re.S)
    assert readme is not None and first_run is not None
    assert first_run.group(1) == readme.group(1)
