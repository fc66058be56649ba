"""W1 ratios: simfl against FLGo and Flower, from the rows the peers' ``bench.py`` wrote.

    python analysis/perf/w1_ratios.py [analysis/perf/results/w1_runs.jsonl] [--rows]
    python analysis/perf/w1_ratios.py --run /path/to/peers-venv/bin/python [--repeats 3]

``--run PYTHON`` first runs the peers' ``bench.py`` with that interpreter (the peers'
virtualenv, see ``shared/peers/README.md``) and simfl beside them (``w1_simfl.py`` with this
interpreter), writing a fresh ``w1_runs.jsonl`` (the previous one is kept as
``w1_runs_prev.jsonl``). ``--rows`` adds one JSON line of rows for ``suite.py``.

For each setting (``base``, ``scale``) prints simfl's median host seconds per simulated round,
the ratios FLGo / simfl and Flower / simfl (Flower's whole loop per round, the target, and its
rounds 2..R alone, ``steady_s_per_round``, for information), and the median final accuracies
side by side with ``|delta acc|`` in percentage points. Medians are over all the rows of a
setting in the file: keep one ``bench.py`` run per file (its repeats are interleaved, so drift
hits every framework alike).

Exits 1 if a target is missed (the issue's target 3): simfl at least 20x faster per round than
FLGo and 100x faster than Flower, with a final accuracy within 1 point of each; exits 2 if a
setting lacks one of the three frameworks. Needs only the standard library.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
from _perf import shown  # noqa: E402

DEFAULT = HERE / "results" / "w1_runs.jsonl"
PEERS = HERE.parents[1].parent / "shared" / "peers"
TARGETS = {"flgo": 20.0, "flower": 100.0}
MAX_DELTA_POINTS = 1.0


def median(rows: list[dict], key: str) -> float | None:
    vals = [r[key] for r in rows if isinstance(r.get(key), (int, float))]
    return statistics.median(vals) if vals else None


def check_setting(scale: str, rows: list[dict]) -> tuple[list[str], list[str]]:
    """Report lines and missed targets of one setting."""
    by_peer = {p: [r for r in rows if r["peer"] == p] for p in ("simfl", "flgo", "flower")}
    missing = [p for p, sel in by_peer.items() if not sel]
    if missing:
        return [f"{scale}: no rows for {', '.join(missing)}"], [f"{scale}: missing {missing}"]
    ours = median(by_peer["simfl"], "host_wall_s_per_round")
    acc = median(by_peer["simfl"], "final_test_acc")
    assert ours is not None and acc is not None
    lines = [
        f"{scale}: simfl {ours * 1e3:.2f} ms/round (median of {len(by_peer['simfl'])}), "
        f"final acc {acc:.4f}, virtual clock {median(by_peer['simfl'], 'virtual_clock_end')} s"
    ]
    missed = []
    for peer, target in TARGETS.items():
        theirs = median(by_peer[peer], "host_wall_s_per_round")
        their_acc = median(by_peer[peer], "final_test_acc")
        assert theirs is not None and their_acc is not None
        ratio = theirs / ours
        delta = abs(acc - their_acc) * 100
        text = (
            f"  {peer}: {theirs * 1e3:.1f} ms/round -> {ratio:.1f}x (target {target:g}x); "
            f"acc {their_acc:.4f}, |delta| {delta:.2f} points"
        )
        steady = median(by_peer[peer], "steady_s_per_round")
        if steady is not None:
            text += f"; rounds 2..R {steady * 1e3:.1f} ms/round -> {steady / ours:.1f}x"
        lines.append(text)
        if ratio < target:
            missed.append(f"{scale}: {peer} ratio {ratio:.1f}x < {target:g}x")
        if delta > MAX_DELTA_POINTS:
            missed.append(f"{scale}: |acc - {peer} acc| = {delta:.2f} > {MAX_DELTA_POINTS} points")
    return lines, missed


def run_bench(python: str, repeats: int, out: Path, peers: Path) -> None:
    """Run the peers' harness now, simfl beside FLGo and Flower, into a fresh ``out``."""
    if out.exists():
        out.replace(out.with_name(out.stem + "_prev" + out.suffix))
    simfl = f"simfl={sys.executable} {HERE / 'w1_simfl.py'}"
    cmd = [python, "bench.py", "--repeats", str(repeats), "--peer", simfl, "--out", str(out)]
    subprocess.run(cmd, cwd=peers, check=True)


def rows_for_suite(rows: list[dict]) -> list[dict]:
    """One row per (setting, peer) in the benchmark suite's format."""
    out = []
    for scale in dict.fromkeys(r["scale"] for r in rows):
        sel = [r for r in rows if r["scale"] == scale]
        ours = median([r for r in sel if r["peer"] == "simfl"], "host_wall_s_per_round")
        acc = median([r for r in sel if r["peer"] == "simfl"], "final_test_acc")
        for peer, target in TARGETS.items():
            theirs = median([r for r in sel if r["peer"] == peer], "host_wall_s_per_round")
            their_acc = median([r for r in sel if r["peer"] == peer], "final_test_acc")
            if None in (ours, acc, theirs, their_acc):
                out.append({"target": f"3 W1 vs {peer}", "setting": scale, "passed": False})
                continue
            ratio, delta = theirs / ours, abs(acc - their_acc) * 100
            c = sel[0]
            out.append(
                {
                    "target": f"3 W1 vs {peer}",
                    "setting": f"{scale}: {c['clients']} clients, {c['per_round']}/round, "
                    f"{c['rounds']} rounds",
                    "simfl": round(ours, 5),
                    "baseline": round(theirs, 5),
                    "unit": "host s per round",
                    "ratio": shown(ratio, 1, at_least=True),
                    "goal": f">= {target:g}x, |acc delta| <= {MAX_DELTA_POINTS:g} point",
                    "passed": ratio >= target and delta <= MAX_DELTA_POINTS,
                    "note": f"accuracy simfl {acc:.4f} vs {their_acc:.4f}",
                }
            )
    return out


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("runs", nargs="?", default=str(DEFAULT), help="bench.py's JSON-lines file")
    p.add_argument("--run", metavar="PYTHON", help="run the peers' bench.py now with PYTHON")
    p.add_argument("--repeats", type=int, default=3, help="bench.py repeats (with --run)")
    p.add_argument("--peers", default=str(PEERS), help="directory of the peers' scripts")
    p.add_argument("--rows", action="store_true", help="end with a JSON line of suite rows")
    a = p.parse_args(argv)
    if a.run:
        run_bench(a.run, a.repeats, Path(a.runs), Path(a.peers))
    rows = [json.loads(line) for line in Path(a.runs).read_text().splitlines() if line.strip()]
    scales = list(dict.fromkeys(r["scale"] for r in rows))
    missed_all: list[str] = []
    incomplete = False
    for scale in scales:
        lines, missed = check_setting(scale, [r for r in rows if r["scale"] == scale])
        print("\n".join(lines))
        incomplete |= any("missing" in m for m in missed)
        missed_all += missed
    if not scales:
        print(f"no rows in {a.runs}")
        return 2
    if missed_all:
        print("MISSED: " + "; ".join(missed_all))
    else:
        print("all W1 targets met")
    if a.rows:
        print(json.dumps(rows_for_suite(rows)))
    if missed_all:
        return 2 if incomplete else 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
