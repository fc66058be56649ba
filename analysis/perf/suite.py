"""The benchmark suite: every performance target of simfl, side by side with its baseline.

    python analysis/perf/suite.py [--quick] [--repeats 5] [--peers PYTHON]
        [--only 1,2,3,4,5,6,avail,links,neural]

1. engine throughput against bare SimPy (``engine_throughput.py``),
2. FedRep-linear overhead against a plain numpy loop (``fedrep_overhead.py``),
3. workload W1 against FLGo and Flower (``w1_simfl.py`` in the peers' harness): with
   ``--peers PYTHON`` the harness runs now with the peers' virtualenv (see ``w1_ratios.py``);
   otherwise the ratios come from the last recorded harness run in ``results/``,
4. a million-device fleet (``million.py``, in fresh processes),
5. scaling curves against fleet and cohort size (``scaling.py``),
6. asynchronous policies: FedBuff and FedAsync against bare SimPy, FedBuff training against
   FastestK, a million-device FedBuff run (``async_throughput.py``),
avail. throughput under on/off availability, abort and pause, against bare SimPy
   (``availability_throughput.py``).
links. shared links against bare SimPy, and one round of 10,000 devices
   (``links_throughput.py``).
neural. the neural targets (``neural_suite.py``): W2 against the fastest peer (from the
   recorded ``bench.py`` rows), batched vs one-by-one cohort training, worker threads, GPU.

Each prints the median of repeated, interleaved runs; all rows go to ``results/suite.json``
and ``results/suite.csv`` with the machine they were measured on. Exit status 1 if a
target is missed.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
import async_throughput
import availability_throughput
import engine_throughput
import fedrep_overhead
import links_throughput
import neural_suite
import scaling
from _perf import HERE, budget_row, fresh_runs, parser, report


def million(quick: bool, repeats: int) -> list[dict[str, Any]]:
    """Target 4 in fresh processes: median run time, highest peak RSS."""
    args = ["--devices", "100000", "--cohort", "1000", "--rounds", "20"] if quick else []
    runs = fresh_runs("million.py", args, repeats)
    r0 = runs[0]
    setting = (
        f"{r0['devices']:,} devices, {r0['cohort']:,}/round, "
        f"{r0['rounds']} rounds FedAvg linear ({r0['jobs']:,} jobs)"
    )
    return [budget_row("4 million devices", setting, runs)]


def peers(python: str | None, repeats: int) -> list[dict[str, Any]]:
    """Target 3 from the peers' harness (run now if given the peers' ``python``)."""
    cmd = [sys.executable, str(HERE / "w1_ratios.py"), "--rows"]
    if python:
        cmd += ["--run", python, "--repeats", str(repeats)]
    out = subprocess.run(cmd, capture_output=True, text=True)
    if out.returncode not in (0, 1) or not out.stdout.strip():
        sys.stderr.write(out.stderr[-2000:])
        return [{"target": "3 W1 vs peers", "passed": False, "note": "could not run"}]
    rows: list[dict[str, Any]] = json.loads(out.stdout.strip().splitlines()[-1])
    return rows


def main() -> None:
    p = parser(__doc__)
    p.add_argument(
        "--only", default="1,2,3,4,5,6,avail,links,neural", help="comma list of targets to run"
    )
    p.add_argument(
        "--peers",
        metavar="PYTHON",
        help="run the peers' harness now with their virtualenv's python (about 10 minutes)",
    )
    p.add_argument(
        "--update",
        action="store_true",
        help="keep the other targets' rows of the existing suite.json (replace only --only's)",
    )
    a = p.parse_args()
    only = set(a.only.split(","))
    rows: list[dict[str, Any]] = []
    steps = {
        "1": lambda: engine_throughput.measure(a.quick, a.repeats),
        "2": lambda: fedrep_overhead.measure(a.quick, a.repeats),
        "3": lambda: peers(a.peers, max(1, min(a.repeats, 3))),
        "4": lambda: million(a.quick, max(1, min(a.repeats, 3))),
        "5": lambda: scaling.measure(a.quick, max(1, min(a.repeats, 3))),
        "6": lambda: async_throughput.measure(a.quick, a.repeats),
        "avail": lambda: availability_throughput.measure(a.quick, a.repeats),
        "links": lambda: links_throughput.measure(a.quick, max(1, min(a.repeats, 3))),
        "neural": lambda: neural_suite.measure(a.quick, a.repeats),
    }
    for key, step in steps.items():
        if key in only:
            print(f"# target {key} ...", file=sys.stderr, flush=True)
            rows += [{**r, "step": key} for r in step()]
    if a.update:
        old = json.loads((Path(a.out) / "suite.json").read_text())["rows"]
        kept = [r for r in old if r.get("step") not in only]
        order = list(steps)
        rows = sorted(kept + rows, key=lambda r: order.index(r.get("step", "1")))
    report(rows, a.out, "suite")
    sys.exit(0 if all(r.get("passed") or r.get("skipped") for r in rows) else 1)


if __name__ == "__main__":
    main()
