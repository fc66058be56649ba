"""W1 ratios: simfl against FLGo and Flower, from the rows the peers' ``bench.py`` wrote.

    python analysis/perf/w1_ratios.py [analysis/perf/results/w1_runs.jsonl]

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
import sys
from pathlib import Path

DEFAULT = Path(__file__).resolve().parent / "results" / "w1_runs.jsonl"
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


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("runs", nargs="?", default=str(DEFAULT), help="bench.py's JSON-lines file")
    a = p.parse_args(argv)
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
        return 2 if incomplete else 1
    print("all W1 targets met")
    return 0


if __name__ == "__main__":
    sys.exit(main())
