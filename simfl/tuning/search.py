"""The search: Optuna's TPE proposes settings, simfl runs them over seeds into a results store.

Each trial is one setting of the knobs, run on the same seeds as every other trial (common
random numbers: two settings are compared on the same device draws, so the difference between
them is not drowned by seed-to-seed noise). Its runs go through :func:`simfl.sweep` into the
store, labelled by the knob paths, so they are stored, skipped when already there, and
reportable like any sweep.

**Sampler.** Optuna's TPE (Watanabe's constrained and multi-objective variants where asked):
it samples integer, real, log-scale and categorical knobs natively, needs no model of the
objective's smoothness, is efficient at the budgets of simulation studies (tens of trials),
and treats a never-reached target (``inf``) as the worst value without breaking. A Gaussian
process sampler would use fewer trials on smooth low-dimensional real knobs but needs torch
and handles categorical knobs (fleets, policies) poorly; CMA-ES needs hundreds of trials and
no categorical knobs. The first trials (``max(3, min(10, trials // 3))``) are drawn at random.

**Pruning** (``prune=True``). After each seed, the trial's objective has an optimistic bound
(:meth:`Measure.bound`: e.g. the mean time to target if every seed still to run took no time);
once that bound cannot beat the best feasible setting found, the trial stops there and is
recorded ``pruned``. A pruned setting could not have won, so pruning changes how many runs a
search costs, never its answer. Measures without such a bound are not pruned.

**Determinism and resuming.** The sampler of trial ``k`` is seeded from ``search_seed`` and
``k`` (the number of trials finished before it), and the history it reads is the study's, so a
search gives the same trials on every executor and number of workers, and one resumed after a
kill gives the trials it would have given uninterrupted: the study is an Optuna journal file
next to the runs (``STORE/tuning/STUDY.journal``), the trial that was running is marked
``FAIL`` (``simfl:abandoned``) and run again with the same setting, and its runs that finished
are found in the store.
"""

from __future__ import annotations

import contextlib
import dataclasses
import hashlib
import json
import math
import os
from collections.abc import Iterable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import optuna
from optuna.storages.journal import JournalFileBackend
from optuna.trial import TrialState
from tqdm.auto import tqdm

from simfl._checks import check_bool, check_int
from simfl.results import Results
from simfl.scenario import Scenario
from simfl.sweeps.executors import Executor, make_executor
from simfl.sweeps.grid import Case, ranges_text
from simfl.sweeps.run import sweep
from simfl.sweeps.store import Store
from simfl.tuning.advice import advise
from simfl.tuning.measures import Constraint, Measure
from simfl.tuning.outcome import Evaluation, TuneInterrupted, TuneOutcome
from simfl.tuning.space import Choice, Knob, apply, check_knobs, distribution, label, value_of

__all__ = ["STUDY_DIR", "tune"]

#: The folder of a store that holds its searches (journals and outcomes).
STUDY_DIR = "tuning"
#: Trial attribute marking a trial left running by a search that was killed.
_ABANDONED = "simfl:abandoned"
_MAX_SEEDS = 1000


def _seeds(name: str, seeds: Iterable[int]) -> list[int]:
    if isinstance(seeds, (str, bytes)):
        raise ValueError(f"tune {name} must be integers such as range(5), got {seeds!r}")
    out = [check_int(f"tune {name} values", s, low=0, high=2**63 - 1) for s in seeds]
    if len(set(out)) < len(out):
        raise ValueError(f"tune {name} lists a seed twice: {ranges_text(out)}")
    if len(out) > _MAX_SEEDS:
        raise ValueError(f"tune {name} must list at most {_MAX_SEEDS} seeds, got {len(out)}")
    return out


def _objectives(objective: Measure | Sequence[Measure]) -> tuple[Measure, ...]:
    items = (objective,) if isinstance(objective, Measure) else tuple(objective)
    if not 1 <= len(items) <= 2 or not all(isinstance(m, Measure) for m in items):
        raise ValueError(
            "tune objective must be a tuning measure (TimeToTarget, UpdatesPerHour, ...) or "
            f"two of them for a Pareto front, got {objective!r}"
        )
    if len(items) == 2 and items[0] == items[1]:
        raise ValueError(f"tune objectives must differ, got {items[0]} twice")
    return items


def _digest(results: Results) -> str:
    """A fingerprint of what a run recorded (its rounds and jobs), to spot identical runs."""
    h = hashlib.sha256()
    for frame in (results.rounds, results.clients):
        h.update(",".join(map(str, frame.columns)).encode())
        for col in frame.columns:
            h.update(np.ascontiguousarray(frame[col].astype(str).to_numpy()).tobytes())
    return h.hexdigest()[:16]


@dataclasses.dataclass
class _Runner:
    """Runs settings over seeds through :func:`simfl.sweep`, remembering what it ran."""

    base: Scenario
    knobs: Mapping[str, Knob]
    store: Store | None
    executor: Executor  # made with the search's workers and threads
    batch: int
    results: dict[str, Results] = dataclasses.field(default_factory=dict)
    ran: int = 0
    reused: int = 0

    def scenario(self, params: Mapping[str, Any]) -> tuple[Scenario, dict[str, Any]]:
        """The scenario of a trial's parameters and the labels of its runs."""
        values = {p: value_of(self.knobs[p], params[p]) for p in self.knobs}
        labels = {p: label(params[p]) for p in self.knobs}
        name = ",".join(f"{p}={v}" for p, v in labels.items())
        return dataclasses.replace(apply(self.base, values), name=name), labels

    def run(self, params: Mapping[str, Any], seeds: Sequence[int]) -> list[Results]:
        """The runs of a setting on ``seeds``, in order; ``RuntimeError`` if one failed."""
        scenario, labels = self.scenario(params)
        cases = [Case(dataclasses.replace(scenario, seed=s), {**labels, "seed": s}) for s in seeds]
        out = sweep(
            cases,
            store=self.store,
            executor=self.executor,
            progress=False,
        )
        self.ran += len(out.ran)
        self.reused += len(out.skipped)
        if out.failed:
            record = out.store.record(out.failed[0]) or {}
            error = str(record.get("error") or "?").strip().splitlines() or ["?"]
            raise RuntimeError(f"run {out.failed[0]} failed: {error[-1]}")
        return [out.store.results(r) for r in out.run_ids]


def _sampler(search_seed: int, done: int, trials: int) -> optuna.samplers.TPESampler:
    seed = int.from_bytes(
        hashlib.sha256(f"simfl-tune/{search_seed}/{done}".encode()).digest()[:4], "little"
    )
    return optuna.samplers.TPESampler(
        seed=seed,
        n_startup_trials=max(3, min(10, trials // 3)),
        multivariate=True,
        constant_liar=False,
    )


@contextlib.contextmanager
def _quiet_optuna() -> Iterator[None]:
    level = optuna.logging.get_verbosity()
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    try:
        yield
    finally:
        optuna.logging.set_verbosity(level)


def _study_signature(
    base: Scenario,
    knobs: Mapping[str, Knob],
    objectives: Sequence[Measure],
    constraints: Sequence[Constraint],
    seeds: Sequence[int],
) -> str:
    """What a stored study must have been started with to be resumed by this call."""
    from simfl.sweeps.fingerprint import fingerprint

    parts = {
        "base": fingerprint(base),
        "knobs": {
            p: repr(k) if not isinstance(k, Choice) else list(k.labels()) for p, k in knobs.items()
        },
        "objectives": [repr(m) for m in objectives],
        "constraints": [repr(c) for c in constraints],
        "seeds": list(seeds),
    }
    return json.dumps(parts, sort_keys=True, default=str)


def _is_done(t: optuna.trial.FrozenTrial) -> bool:
    if t.state in (TrialState.COMPLETE, TrialState.PRUNED):
        return True
    return t.state == TrialState.FAIL and not t.system_attrs.get(_ABANDONED)


def _better(a: float, b: float, direction: str) -> bool:
    return a < b if direction == "minimize" else a > b


def _dominates(a: Sequence[float], b: Sequence[float], directions: Sequence[str]) -> bool:
    """Whether ``a`` is at least as good as ``b`` everywhere and better somewhere."""
    sign = [1.0 if d == "minimize" else -1.0 for d in directions]
    x = [s * v for s, v in zip(sign, a, strict=True)]
    y = [s * v for s, v in zip(sign, b, strict=True)]
    return all(p <= q for p, q in zip(x, y, strict=True)) and any(
        p < q for p, q in zip(x, y, strict=True)
    )


def _hopeless(
    bounds: Sequence[float | None],
    study: optuna.Study,
    directions: Sequence[str],
) -> bool:
    """Whether a feasible finished trial is at least as good as the trial's optimistic bounds.

    Such a trial cannot win (at best it ties), so running its other seeds would change nothing
    the search returns.
    """
    if any(b is None for b in bounds):
        return False
    b = [float(v) for v in bounds if v is not None]
    best = [
        list(t.values)
        for t in study.get_trials(deepcopy=False, states=(TrialState.COMPLETE,))
        if t.user_attrs.get("feasible", False) and not any(math.isinf(v) for v in t.values)
    ]
    if len(directions) == 1:
        return any(not _better(b[0], v[0], directions[0]) for v in best)
    return any(_dominates(v, b, directions) or v == b for v in best)


def tune(
    base: Scenario | Case,
    knobs: Mapping[str, Knob],
    objective: Measure | Sequence[Measure],
    *,
    constraints: Sequence[Constraint] = (),
    seeds: Iterable[int] = range(3),
    trials: int = 30,
    fresh_seeds: Iterable[int] | None = None,
    store: str | os.PathLike[str] | Store | None = None,
    study: str | None = None,
    search_seed: int = 0,
    prune: bool = True,
    executor: str | Executor | None = None,
    workers: int | None = None,
    threads: int | None = None,
    progress: bool = True,
) -> TuneOutcome:
    """Search the knobs of a scenario for the setting that optimises an objective over seeds.

    Parameters
    ----------
    base
        The scenario (or a sweep case) whose fields the knobs set.
    knobs
        ``{path: knob}``: dataclass paths of the scenario's fields (``"policy.seconds"``,
        ``"policy.count"``, ``"fleet"``) and their :class:`~simfl.tuning.Float`,
        :class:`~simfl.tuning.Int` or :class:`~simfl.tuning.Choice`.
    objective
        A measure (:mod:`simfl.tuning.measures`), optimised in its own direction; two
        measures give a Pareto front.
    constraints
        :class:`~simfl.tuning.Constraint` objects the chosen setting must meet (over the
        seeds, as the measure combines them).
    seeds
        The seeds every trial runs (the same for all: common random numbers).
    trials
        Trials to finish (complete, pruned or failed); a resumed study counts those it has.
    fresh_seeds
        Seeds the search never saw, on which the best setting (each setting of the front) is
        run again to report its value without the search's selection bias. Default: as many
        seeds as ``seeds``, following the largest of them; ``()`` skips it.
    store
        The results store (as for :func:`simfl.sweep`); the study's journal and outcome go in
        its ``tuning/`` folder, so a search resumes where it stopped. ``None``: in memory.
    study
        The study's name within the store (default: the scenario's name).
    search_seed
        Seeds the sampler: the same seed, knobs and objective give the same trials.
    prune
        Stop trials whose optimistic bound cannot beat the best setting found.
    executor, workers, threads
        Where the runs execute, as for :func:`simfl.sweep`.
    progress
        Show a bar over trials with the best value so far.

    Returns
    -------
    TuneOutcome
        The trials, the best setting (or the front) with its mean and bootstrap CI over the
        seeds and over the fresh seeds, the warnings, and the store.

    Raises
    ------
    ValueError
        Before any run: a knob path that names no field, a range of the wrong type or one
        whose ends the scenario refuses, an objective or constraint the scenario's runs cannot
        give (a metric the task does not report), a constraint no run can meet, or a stored
        study of the same name started with other knobs, objectives, constraints or seeds.
    TuneInterrupted
        On ``KeyboardInterrupt``, with the outcome so far; the same call resumes the search.
    """
    if isinstance(base, Case):
        base = base.scenario
    if not isinstance(base, Scenario):
        raise ValueError(f"tune needs a simfl.Scenario (or a sweeps.Case), got {base!r}")
    check_knobs(base, knobs)
    objectives = _objectives(objective)
    for m in objectives:
        m.check(base)
    constraints = tuple(constraints)
    for c in constraints:
        if not isinstance(c, Constraint):
            raise ValueError(f"tune constraints must be tuning.Constraint objects, got {c!r}")
        c.measure.check(base)
    seed_list = _seeds("seeds", seeds)
    if not seed_list:
        raise ValueError("tune seeds must list at least one seed")
    trials = check_int("tune trials", trials, low=1, high=100_000)
    search_seed = check_int("tune search_seed", search_seed, low=0, high=2**63 - 1)
    prune = check_bool("tune prune", prune)
    progress = check_bool("tune progress", progress)
    if fresh_seeds is None:
        top = max(seed_list) + 1
        fresh = list(range(top, top + len(seed_list)))
    else:
        fresh = _seeds("fresh_seeds", fresh_seeds)
        common = sorted(set(fresh) & set(seed_list))
        if common:
            raise ValueError(
                f"tune fresh_seeds must be seeds the search never saw; {ranges_text(common)} "
                f"are also in seeds"
            )
    directions: list[Any] = [m.direction_for(base) for m in objectives]
    name = study or base.name
    if not isinstance(name, str) or not name or "/" in name or name.startswith("."):
        raise ValueError(f"tune study must be a plain name (no '/'), got {name!r}")

    disk = (
        store if isinstance(store, Store) else None if store is None else Store(store, create=True)
    )
    signature = _study_signature(base, knobs, objectives, constraints, seed_list)
    with _quiet_optuna():
        storage: optuna.storages.BaseStorage = optuna.storages.InMemoryStorage()
        if disk is not None:
            folder = disk.path / STUDY_DIR
            folder.mkdir(exist_ok=True)
            storage = optuna.storages.JournalStorage(
                JournalFileBackend(str(folder / f"{name}.journal"))
            )
        opt = optuna.create_study(
            study_name=name,
            storage=storage,
            directions=directions,
            load_if_exists=True,
        )
        stored = opt.user_attrs.get("simfl:signature")
        if stored is None:
            opt.set_user_attr("simfl:signature", signature)
        elif stored != signature:
            raise ValueError(
                f"tune study {name!r} in {disk.path if disk else 'memory'} was started with "
                f"other knobs, objectives, constraints, seeds or base scenario; give another "
                f"study= name (or remove {STUDY_DIR}/{name}.journal to start over)"
            )
        study_id = storage.get_study_id_from_name(name)
        for t in opt.get_trials(deepcopy=False, states=(TrialState.RUNNING,)):
            # left running by a search that was killed: marked failed, and run again
            trial_id = storage.get_trial_id_from_study_id_trial_number(study_id, t.number)
            storage.set_trial_system_attr(trial_id, _ABANDONED, True)
            storage.set_trial_state_values(trial_id, TrialState.FAIL)
            opt.enqueue_trial(dict(t.params), skip_if_exists=False)

        runner_exec = (
            executor
            if isinstance(executor, Executor)
            else make_executor(executor, workers=workers, threads=threads)
        )
        runner = _Runner(
            base,
            knobs,
            disk,
            runner_exec,
            batch=max(1, getattr(runner_exec, "workers", None) or 1),
        )
        dists = {p: distribution(k) for p, k in knobs.items()}
        bar = tqdm(total=trials, disable=not progress, desc="tune", unit="trial")
        try:
            done = sum(_is_done(t) for t in opt.get_trials(deepcopy=False))
            bar.update(min(done, trials))
            while done < trials:
                opt.sampler = _sampler(search_seed, done, trials)
                trial = opt.ask(dists)
                _evaluate(opt, trial, runner, seed_list, objectives, constraints, directions, prune)
                done += 1
                bar.update(1)
                _postfix(bar, opt, directions)
        except KeyboardInterrupt:
            partial = _outcome(
                opt,
                runner,
                base,
                knobs,
                objectives,
                constraints,
                seed_list,
                (),
                directions,
                name,
                disk,
            )
            raise TuneInterrupted(partial) from None
        finally:
            bar.close()
        outcome = _outcome(
            opt,
            runner,
            base,
            knobs,
            objectives,
            constraints,
            seed_list,
            fresh,
            directions,
            name,
            disk,
        )
        if not isinstance(executor, Executor):
            runner_exec.close()
    if disk is not None:
        outcome.save(disk.path / STUDY_DIR / f"{name}.json")
    return outcome


def _postfix(bar: Any, opt: optuna.Study, directions: Sequence[str]) -> None:
    if len(directions) != 1:
        return
    best = [
        t.values[0]
        for t in opt.get_trials(deepcopy=False, states=(TrialState.COMPLETE,))
        if t.user_attrs.get("feasible", False)
    ]
    if best:
        pick = min(best) if directions[0] == "minimize" else max(best)
        bar.set_postfix_str(f"best {pick:.4g}")


def _evaluate(
    opt: optuna.Study,
    trial: optuna.trial.Trial,
    runner: _Runner,
    seeds: Sequence[int],
    objectives: Sequence[Measure],
    constraints: Sequence[Constraint],
    directions: Sequence[str],
    prune: bool,
) -> None:
    """Run a trial's seeds (in batches of the executor's workers), pruning it when hopeless."""
    params = dict(trial.params)
    per_seed: list[list[float]] = [[] for _ in objectives]
    results: list[Results] = []
    pruned_at: int | None = None
    try:
        i = 0
        while i < len(seeds) and pruned_at is None:
            chunk = seeds[i : i + runner.batch]
            batch = runner.run(params, chunk)
            for res in batch:  # the bound after each seed: the same whatever the batch size
                results.append(res)
                for j, m in enumerate(objectives):
                    per_seed[j].append(m.per_run(res))
                k = len(results)
                if k < len(seeds):
                    bounds = [m.bound(per_seed[j], len(seeds)) for j, m in enumerate(objectives)]
                    if len(objectives) == 1 and bounds[0] is not None:
                        trial.report(bounds[0], step=k)
                    if prune and _hopeless(bounds, opt, directions):
                        pruned_at = k
                        break
            i += len(chunk)
    except RuntimeError as exc:
        trial.set_user_attr("error", str(exc))
        opt.tell(trial, state=TrialState.FAIL)
        return
    seed_used = seeds[: len(results)]
    trial.set_user_attr("seeds", list(seed_used))
    trial.set_user_attr("digests", [_digest(r) for r in results])
    for j, m in enumerate(objectives):
        trial.set_user_attr(f"per_seed:{m.name}", [float(v) for v in per_seed[j]])
    c_values = [
        c.measure.combine([c.measure.per_run(r) for r in results], results) for c in constraints
    ]
    violations = [c.violation(v) for c, v in zip(constraints, c_values, strict=True)]
    trial.set_user_attr("constraint_values", [float(v) for v in c_values])
    for c, v in zip(constraints, violations, strict=True):
        trial.set_constraint(c.name, v)  # what the sampler reads (<= 0: met)
    trial.set_user_attr("max_selected", _max_selected(results))
    values = [m.combine(per_seed[j], results) for j, m in enumerate(objectives)]
    trial.set_user_attr("values", [float(v) for v in values])
    feasible = all(v <= 0 for v in violations) and not any(math.isnan(v) for v in values)
    trial.set_user_attr("feasible", feasible and pruned_at is None)
    if pruned_at is not None:
        trial.set_user_attr("pruned_at", pruned_at)
        opt.tell(trial, state=TrialState.PRUNED)
        return
    if any(math.isnan(v) for v in values):
        trial.set_user_attr("error", "the objective is not defined for these runs (NaN)")
        opt.tell(trial, state=TrialState.FAIL)
        return
    opt.tell(trial, values)


def _max_selected(results: Sequence[Results]) -> int:
    """The largest cohort any round of the runs selected (for the capped-knob warning)."""
    sizes = [int(r.rounds["n_selected"].max()) for r in results if len(r.rounds)]
    return max(sizes) if sizes else 0


def _outcome(
    opt: optuna.Study,
    runner: _Runner,
    base: Scenario,
    knobs: Mapping[str, Knob],
    objectives: Sequence[Measure],
    constraints: Sequence[Constraint],
    seeds: Sequence[int],
    fresh: Sequence[int],
    directions: Sequence[str],
    name: str,
    store: Store | None,
) -> TuneOutcome:
    trials = [t for t in opt.get_trials(deepcopy=False) if _is_done(t)]
    complete = [t for t in trials if t.state == TrialState.COMPLETE]
    feasible = [t for t in complete if t.user_attrs.get("feasible", False)]
    chosen: list[optuna.trial.FrozenTrial] = []
    if len(objectives) == 1:
        finite = [t for t in feasible if not math.isinf(t.values[0])]
        if finite:
            pick = min if directions[0] == "minimize" else max
            chosen = [pick(finite, key=lambda t: t.values[0])]
    else:
        finite = [t for t in feasible if not any(math.isinf(v) for v in t.values)]
        chosen = [
            t for t in finite if not any(_dominates(o.values, t.values, directions) for o in finite)
        ]
        seen: set[tuple[Any, ...]] = set()
        unique = []
        for t in sorted(chosen, key=lambda t: tuple(t.values)):
            key = tuple(sorted(t.params.items()))
            if key not in seen:
                seen.add(key)
                unique.append(t)
        chosen = unique
    evaluations = []
    for t in chosen:
        again = runner.run(t.params, fresh) if fresh else []
        evaluations.append(Evaluation.of(t, objectives, constraints, seeds, fresh, again))
    return TuneOutcome(
        study=name,
        store=store,
        knobs=dict(knobs),
        objectives=tuple(objectives),
        directions=tuple(directions),
        constraints=tuple(constraints),
        seeds=tuple(seeds),
        fresh_seeds=tuple(fresh),
        trials=TuneOutcome.table(trials, knobs, objectives, constraints),
        best=tuple(evaluations),
        warnings=tuple(advise(base, knobs, objectives, constraints, trials, seeds)),
        runs=runner.ran,
        reused=runner.reused,
    )


def read_outcome(path: str | os.PathLike[str]) -> dict[str, Any]:
    """The saved outcome of a search (``STORE/tuning/STUDY.json``) as a dict."""
    return dict(json.loads(Path(path).read_text()))
