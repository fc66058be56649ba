"""W2 through simfl's training paths, side by side: module loop, module cohort, paper fast path.

W2 (the peers' LeNet-5 FedAvg on Fashion-MNIST, ``w2_simfl.py``) runs in fresh processes,
interleaved, once per repeat for each variant:

* ``module-loop``: LeNet-5 as an ordinary ``torch.nn.Module`` (``CNN.lenet5_classic().factory``)
  on the generic trainer's per-client loop (``Model(trainer="loop")``, the CPU default);
* ``module-cohort``: the same module, ``vmap`` over the cohort (``Model(trainer="cohort")``);
* ``paper``: the paper network's fast path (``Net``: batched linear layers, simfl's kernels);
* ``base``: the fast path of another checkout (``--base``), when given.

Each variant's per-round host CPU and wall seconds are the medians over the repeats; the
ratios are measured side by side in this one run (the machine is shared and noisy). The
generic path's one-time set-up inside ``simfl.run`` (``FlopCounterMode`` imports
``torch._dynamo`` on its first use, about 1.5 s) is in the wall time as the peers measure it.
Writes ``results/module_paths.json``::

    git worktree add --detach /tmp/simfl-base COMMIT
    SIMFL_PEERS=../shared/peers python analysis/perf/module_paths.py --base /tmp/simfl-base
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import subprocess
import sys
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]

VARIANTS: dict[str, list[str]] = {
    "module-loop": ["--path", "module", "--trainer", "loop"],
    "module-cohort": ["--path", "module", "--trainer", "cohort"],
    "paper": ["--path", "paper"],
}


def cpu_name() -> str:
    """The CPU's model name (``/proc/cpuinfo``), else the platform's machine type."""
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def once(tree: Path, flags: list[str], rounds: int) -> dict[str, Any]:
    """One W2 run of ``tree``'s ``w2_simfl.py`` in a fresh process: its JSON row."""
    env = {**os.environ, "PYTHONPATH": str(tree)}
    cmd = [sys.executable, str(tree / "analysis/perf/w2_simfl.py"), "--rounds", str(rounds)]
    out = subprocess.run(
        [*cmd, *flags], env=env, cwd=tree, capture_output=True, text=True, check=True
    )
    return dict(json.loads(out.stdout.strip().splitlines()[-1]))


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--base", type=Path, default=None, help="another checkout's root (optional)")
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--rounds", type=int, default=50)
    p.add_argument("--out", type=Path, default=HERE / "results" / "module_paths.json")
    a = p.parse_args(argv)
    plan: list[tuple[str, Path, list[str]]] = [(k, ROOT, v) for k, v in VARIANTS.items()]
    if a.base is not None:
        plan.append(("base", a.base.resolve(), []))
    rows: dict[str, list[dict[str, Any]]] = {name: [] for name, _, _ in plan}
    for r in range(a.repeats):
        for name, tree, flags in plan:
            row = once(tree, flags, a.rounds)
            rows[name].append(row)
            print(
                f"repeat {r}: {name:14s} cpu/round {row['host_cpu_s_per_round']:.4f} s, "
                f"wall/round {row['host_wall_s_per_round']:.4f} s, "
                f"accuracy {row['final_test_acc']:.4f}",
                flush=True,
            )
    summary: dict[str, Any] = {}
    for name, got in rows.items():
        summary[name] = {
            "cpu_s_per_round": statistics.median(r["host_cpu_s_per_round"] for r in got),
            "wall_s_per_round": statistics.median(r["host_wall_s_per_round"] for r in got),
            "final_test_acc": [r["final_test_acc"] for r in got],
        }
    ratios = {}
    for ref in ("paper", "base"):
        if ref not in summary:
            continue
        for name in ("module-loop", "module-cohort"):
            for what in ("cpu_s_per_round", "wall_s_per_round"):
                key = f"{name} / {ref} ({what.split('_')[0]})"
                ratios[key] = round(summary[name][what] / summary[ref][what], 4)
    ratios["module-cohort / module-loop (cpu)"] = round(
        summary["module-cohort"]["cpu_s_per_round"] / summary["module-loop"]["cpu_s_per_round"],
        4,
    )
    result = {
        "workload": f"W2: {a.rounds} rounds, 10 of 100 clients, 1 epoch, batch 50, 1 thread",
        "machine": {"cpu": cpu_name(), "cores": os.cpu_count()},
        "repeats": a.repeats,
        "base": None if a.base is None else str(a.base),
        "summary": summary,
        "ratios": ratios,
        "runs": rows,
    }
    a.out.parent.mkdir(parents=True, exist_ok=True)
    a.out.write_text(json.dumps(result, indent=2) + "\n")
    for key, value in ratios.items():
        print(f"{key}: {value}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
