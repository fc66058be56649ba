"""Render the docs' generated blocks (tables and paragraphs) from the results files.

Every number in these blocks is read from a file a script wrote, so the documentation cannot
drift from what the scripts print. Each block sits in its page between ``<!-- NAME:begin -->``
and ``<!-- NAME:end -->`` (:data:`BLOCKS` says which page):

* ``checks`` (``docs/validation.md``): one row per analysis script, from
  ``analysis/results/<script>.json`` (its ``checks`` and ``measured`` fields; see
  ``analysis/_common.write_results``);
* ``reproduction`` (``docs/validation.md``): every claim of the five seed papers, with ours
  beside the paper's and a status (reproduced / qualitative / not reproduced / not attempted,
  and why): the ``claims`` of the results files plus ``analysis/paper_claims.json`` (the claims
  no script attempts);
* ``performance`` and ``training`` (``docs/performance.md``): the rows of
  ``analysis/perf/results/suite.json`` (``analysis/perf/suite.py``) and the training-path and
  W3 tables of ``analysis/perf/results/``;
* ``byo-examples`` (``docs/algorithms.md``): the two examples of ``docs/bring-your-own.md`` at
  full size, from ``analysis/results/byo_examples.json`` (``analysis/byo_examples.py``);
* ``groups-energy`` (``docs/fleets.md``): the paragraph on ``groups_energy.png``, from
  ``analysis/results/groups_energy.json`` (``analysis/groups_energy.py``);
* ``catalogue`` (``docs/policies.md``): the straggler-mitigation catalogue, from
  ``analysis/results/policy_catalogue.json`` (``analysis/policy_catalogue.py``);
* ``twin-fidelity`` (``docs/twin.md``): the fidelity study of the twin, from
  ``analysis/results/twin_fidelity.json`` (``analysis/twin_fidelity.py``).

The policy search's worked examples are rendered into ``docs/policy-search.md`` by
``analysis/tune_docs.py`` the same way.

    python analysis/docs_tables.py            # rewrite the pages' blocks
    python analysis/docs_tables.py --check    # exit 1 if a page differs (tests run this)
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
RESULTS = HERE / "results"
STATIC = HERE / "paper_claims.json"
SUITE = HERE / "perf" / "results" / "suite.json"
BYO = RESULTS / "byo_examples.json"
GROUPS_ENERGY = RESULTS / "groups_energy.json"
CATALOGUE = RESULTS / "policy_catalogue.json"
TWIN = RESULTS / "twin_fidelity.json"
DOCS = ROOT / "docs"

PAPERS = ("FedRep", "LG-FedAvg", "SRPFL", "FedDAR", "FedMAvg", "theory")
STATUSES = ("reproduced", "qualitative", "not reproduced", "not attempted")


def results_files(folder: Path = RESULTS) -> list[dict[str, Any]]:
    """The analysis scripts' results (files with ``checks``), sorted by script."""
    out = []
    for path in sorted(folder.glob("*.json")):
        data = json.loads(path.read_text())
        if isinstance(data, dict) and "checks" in data:
            if data.get("size") != "full":
                raise ValueError(f"{path} holds a {data.get('size')!r} run; the docs need full")
            out.append(data)
    return out


def _full(path: Path) -> dict[str, Any]:
    """A results file written by :func:`_common.write_results`, refused unless full size."""
    data: dict[str, Any] = json.loads(path.read_text())
    if data.get("size") != "full":
        raise ValueError(f"{path} holds a {data.get('size')!r} run; the docs need full")
    return data


def _cell(text: object) -> str:
    return str(text).replace("|", "\\|").replace("\n", " ")


def checks_table(files: list[dict[str, Any]]) -> str:
    lines = ["| script | what it checks | measured |", "|---|---|---|"]
    for data in files:
        script = Path(data["script"]).name
        lines.append(f"| `{script}` | {_cell(data['checks'])} | {_cell(data['measured'])} |")
    return "\n".join(lines)


def all_claims(files: list[dict[str, Any]], static: Path = STATIC) -> list[dict[str, str]]:
    """Every claim: the scripts' then the static ones, ordered by paper."""
    rows = []
    for data in files:
        for c in data["claims"]:
            rows.append({**c, "script": Path(data["script"]).name})
    for c in json.loads(static.read_text())["claims"]:
        rows.append({**c, "script": ""})
    for c in rows:
        if c["paper"] not in PAPERS:
            raise ValueError(f"claim paper must be one of {PAPERS}, got {c['paper']!r}")
        if c["status"] not in STATUSES:
            raise ValueError(f"claim status must be one of {STATUSES}, got {c['status']!r}")
        if c["status"] != "reproduced" and not c.get("why"):
            raise ValueError(f"claim {c['claim']!r} is {c['status']!r} without saying why")
    return sorted(rows, key=lambda c: PAPERS.index(c["paper"]))  # stable: scripts, then static


def reproduction_table(claims: list[dict[str, str]]) -> str:
    lines = [
        "| paper | claim | the paper | ours | status | script |",
        "|---|---|---|---|---|---|",
    ]
    previous = ("", "")
    for c in claims:
        why = c.get("why", "")
        if why and (c["script"], why) == previous:
            why = "as above"  # the same reason as the row before, from the same script
        else:
            previous = (c["script"], why)
        status = f"**{c['status']}**" + (f": {why}" if why else "")
        script = f"`{c['script']}`" if c["script"] else ""
        lines.append(
            f"| {c['paper']} | {_cell(c['claim'])} | {_cell(c['paper_value'])} | "
            f"{_cell(c['ours'])} | {_cell(status)} | {script} |"
        )
    counts = {s: sum(c["status"] == s for c in claims) for s in STATUSES}
    lines.append("")
    lines.append(
        f"{len(claims)} claims: " + ", ".join(f"{n} {s}" for s, n in counts.items() if n) + "."
    )
    return "\n".join(lines)


def _number(value: Any) -> str:
    if isinstance(value, bool) or value is None:
        return str(value)
    if isinstance(value, int) or (isinstance(value, float) and value.is_integer() and value > 99):
        return f"{value:,.0f}"
    if isinstance(value, float):
        return f"{value:.3g}"
    return str(value)


def performance_table(suite: Path = SUITE) -> str:
    data = json.loads(suite.read_text())
    rows = data["rows"] if isinstance(data, dict) else data
    lines = [
        "| target | workload | simfl | baseline | unit | ratio | goal | met | note |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        met = "yes" if r.get("passed") else "skipped" if r.get("skipped") else "**missed**"
        lines.append(
            "| "
            + " | ".join(
                _cell(x)
                for x in (
                    r.get("target", ""),
                    r.get("setting", ""),
                    _number(r.get("simfl", "")),
                    _number(r.get("baseline", "")),
                    r.get("unit", ""),
                    f"**{_number(r['ratio'])}**" if r.get("ratio", "") != "" else "",
                    r.get("goal", ""),
                    met,
                    r.get("note", ""),
                )
            )
            + " |"
        )
    machine = data.get("machine") if isinstance(data, dict) else None
    if machine:
        lines.append("")
        lines.append(f"Measured on: {_cell(machine)}.")
    return "\n".join(lines)


MODULE_PATHS = HERE / "perf" / "results" / "module_paths.json"

_PATH_NAMES = {
    "module-loop": "LeNet-5 as a torch.nn.Module, per-client loop (the CPU default)",
    "module-cohort": "LeNet-5 as a torch.nn.Module, vmap over the cohort",
    "paper": "the paper network's fast path (Net)",
    "base": "the fast path of another checkout (--base)",
}


def training_table(path: Path = MODULE_PATHS) -> str:
    """W2 through each training path, side by side (``analysis/perf/module_paths.py``)."""
    if not path.exists():
        return "(no results: run analysis/perf/module_paths.py)"
    data = json.loads(path.read_text())
    summary = data["summary"]
    ref = "base" if "base" in summary else "paper"
    lines = [
        "| path | CPU s per round | wall s per round | CPU vs " + ref + " | final accuracy |",
        "|---|---|---|---|---|",
    ]
    for name, row in summary.items():
        ratio = row["cpu_s_per_round"] / summary[ref]["cpu_s_per_round"]
        accs = ", ".join(f"{a:.4f}" for a in sorted(set(row["final_test_acc"])))
        lines.append(
            f"| {_cell(_PATH_NAMES.get(name, name))} | {row['cpu_s_per_round']:.3f} | "
            f"{row['wall_s_per_round']:.3f} | {ratio:.2f}x | {accs} |"
        )
    lines.append("")
    lines.append(
        f"{_cell(data['workload'])}; median of {data['repeats']} interleaved runs each on "
        f"{_cell(data['machine']['cpu'])} ({data['machine']['cores']} cores, shared)."
    )
    return "\n".join(lines)


W3_SUMMARY = HERE / "perf" / "results" / "w3_summary.json"


def w3_table(path: Path = W3_SUMMARY) -> str:
    """W3 (the docs' ResNet) on simfl's two paths and pfl-research (``w3_compare.py``)."""
    if not path.exists():
        return "(no results: run analysis/perf/w3_compare.py)"
    data = json.loads(path.read_text())
    rows = data["peers"]
    pfl = rows["pfl"]
    lines = [
        "| W3 | CPU s per round | wall s per round | CPU vs pfl | final accuracy by seed |",
        "|---|---|---|---|---|",
    ]
    for name, row in rows.items():
        ratio = row["host_cpu_s_per_round"] / pfl["host_cpu_s_per_round"]
        accs = ", ".join(f"{v:.4f}" for _, v in sorted(row["final_test_acc_by_seed"].items()))
        lines.append(
            f"| {_cell(row['framework'])} ({_cell(name)}) | {row['host_cpu_s_per_round']:.3f} | "
            f"{row['host_wall_s_per_round']:.3f} | {ratio:.2f}x | {accs} |"
        )
    lines.append("")
    lines.append(f"{_cell(data['workload'])}; medians over the runs of each.")
    return "\n".join(lines)


def _mean_time(times: list[float | None]) -> str:
    """Mean simulated seconds to target over the seeds (``None``: a seed never reached it)."""
    missed = sum(t is None for t in times)
    if missed:
        return f"not reached in {missed} of {len(times)} seeds"
    mean = sum(t for t in times if t is not None) / len(times)
    return f"{mean:.3g} s" if mean < 100 else f"{mean:,.0f} s"


def byo_table(data: dict[str, Any]) -> str:
    """The bring-your-own examples: accuracy, time to target and FedBuff's speedup."""
    numbers = data["numbers"]
    examples = sorted(numbers["examples"].items(), key=lambda kv: kv[0] != "resnet_fmnist")
    lines = [
        "| example | model | clients | final accuracy, wait-all / FedBuff | target | "
        "time to target, wait-all / FedBuff | FedBuff's speedup |",
        "|---|---|---|---|---|---|---|",
    ]
    for name, e in examples:
        wa, fb = e["policies"]["wait-all"], e["policies"]["fedbuff"]
        if e["speedup"] is None:
            speed = _cell(e["speedup_note"])
        else:
            lo, hi = e["speedup_ci"]
            speed = f"**{e['speedup']:.1f}x** [{lo:.1f}, {hi:.1f}]"
        lines.append(
            f"| [`{name}.py`](examples/{name}.py) | {e['model']}, {e['parameters']:,} "
            f"parameters, {e['trainer']} path | {e['devices']} | {wa['final_accuracy_mean']:.3f} / "
            f"{fb['final_accuracy_mean']:.3f} | {e['target']:.3f} | "
            f"{_mean_time(wa['time_to_target'])} / {_mean_time(fb['time_to_target'])} | {speed} |"
        )
    seeds = {len(e["seeds"]) for _, e in examples}
    rounds = {e["rounds"] for _, e in examples}
    host = sum(sum(v["host_seconds"]) for _, e in examples for v in e["policies"].values())
    lines.append("")
    lines.append(
        f"Means over {'/'.join(map(str, sorted(seeds)))} seeds of "
        f"{'/'.join(map(str, sorted(rounds)))} aggregations; the target is "
        f"{_cell(numbers['target_rule'])}; times are simulated seconds, and the speedup's 95% "
        f"interval is a paired bootstrap over the seeds. The runs took {host / 60:.0f} minutes "
        f"of host time in all (torch {numbers['versions']['torch']}, {_cell(numbers['machine'])})."
    )
    return "\n".join(lines)


def render_all() -> dict[str, str]:
    """The text of every block, by marker name."""
    import groups_energy
    import policy_catalogue
    import twin_fidelity

    files = results_files()
    return {
        "checks": checks_table(files),
        "reproduction": reproduction_table(all_claims(files)),
        "performance": performance_table(),
        "training": training_table() + "\n\n" + w3_table(),
        "byo-examples": byo_table(json.loads(BYO.read_text())),
        "groups-energy": groups_energy.docs_text(json.loads(GROUPS_ENERGY.read_text())),
        "catalogue": policy_catalogue.docs_table(json.loads(CATALOGUE.read_text())),
        "twin-fidelity": twin_fidelity.docs_text(_full(TWIN)["numbers"]),
    }


#: The page each block sits in.
BLOCKS = {
    "checks": DOCS / "validation.md",
    "reproduction": DOCS / "validation.md",
    "performance": DOCS / "performance.md",
    "training": DOCS / "performance.md",
    "byo-examples": DOCS / "algorithms.md",
    "groups-energy": DOCS / "fleets.md",
    "catalogue": DOCS / "policies.md",
    "twin-fidelity": DOCS / "twin.md",
}


def replace_block(text: str, name: str, body: str, page: str = "the page") -> str:
    """``text`` with the block ``name`` holding ``body``; both markers must be there once."""
    begin, end = f"<!-- {name}:begin -->", f"<!-- {name}:end -->"
    if text.count(begin) != 1 or text.count(end) != 1:
        raise ValueError(f"{page} needs exactly one {begin} and one {end}")
    head, rest = text.split(begin)
    _, tail = rest.split(end)
    return f"{head}{begin}\n{body}\n{end}{tail}"


def rendered_pages(pages: dict[Path, str] | None = None) -> dict[Path, str]:
    """Each page's text with its blocks rendered (``pages``: the texts to render into, by path;
    by default the pages on disk)."""
    if pages is None:
        pages = {path: path.read_text() for path in dict.fromkeys(BLOCKS.values())}
    out = dict(pages)
    for name, body in render_all().items():
        path = BLOCKS[name]
        out[path] = replace_block(out[path], name, body, str(path.relative_to(ROOT)))
    return out


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--check", action="store_true", help="exit 1 if a page differs")
    args = p.parse_args()
    new = rendered_pages()
    stale = [path for path, text in new.items() if path.read_text() != text]
    if args.check:
        if stale:
            names = ", ".join(str(path.relative_to(ROOT)) for path in stale)
            print(f"{names}: blocks differ from the results files: run analysis/docs_tables.py")
            sys.exit(1)
        print("the docs' blocks match the results files")
        return
    for path in stale:
        path.write_text(new[path])
    print(f"rendered {', '.join(render_all())} into {len(new)} pages ({len(stale)} changed)")


if __name__ == "__main__":
    main()
