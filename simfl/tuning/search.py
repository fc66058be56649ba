"""The search: Optuna's TPE proposes settings, simfl runs them over seeds into a results store.

Each trial is one setting of the knobs, run on the same seeds as every other trial (common
random numbers: two settings are compared on the same device draws, so the difference between
them is not drowned by seed-to-seed noise). Its runs go through :func:`simfl.sweep` into the
store, labelled by the knob paths, so they are stored, skipped when already there, and
reportable like any sweep.

**Sampler.** The first trials (:func:`startup_trials`: two per knob plus two, at most ten) are
points of a scrambled Sobol sequence (scipy's, keyed by ``search_seed``), which covers the box
more evenly than random draws; then Optuna's TPE, with its constrained and multi-objective
variants where asked. TPE samples integer, real, log-scale and categorical knobs natively,
assumes nothing about the objective's smoothness, and works at the budgets of simulation studies
(tens of trials). A Gaussian-process sampler needs torch, handles categorical knobs (fleets,
policies) poorly, and in our deadline study was steered off by the cliff where targets stop
being reached; CMA-ES needs hundreds of trials and no categorical knobs.

**Targets never reached.** A seed that misses the target makes the setting's mean ``inf``
whatever the other seeds give, so the trial stops at that seed; it is recorded with its
``inf`` value and infeasible: it carries the constraint ``simfl:target-missed`` (the share of
its seeds that missed). Tables and the outcome show ``inf`` and "not reached". Optuna needs
a finite value for a complete trial, so it is told what the runs showed at least (the
simulated time or energy they spent, :meth:`Measure.censored`); TPE does not read it: it
puts infeasible trials among the settings to avoid, ranked by their total violation. For
that ranking every constraint is told to the sampler relative to its bound (an overshoot of
10% is 0.1 whatever the unit), so a missed target and a broken constraint weigh alike.

**Pruning** (``prune=True``), after each seed of a trial, of settings that cannot win or are
clearly worse: (1) *bound*: the objective's optimistic bound (:meth:`Measure.bound`, e.g.
the mean time to target if every seed still to run took no time) is no better than the best
feasible setting found, so the trial could at best tie; (2) *paired evidence* (one
objective, from :data:`PAIRED_MIN_SEEDS` seeds on): on the seeds run so far the trial is
worse than the best setting on the same seeds by a one-sided paired t-test at level
:data:`PAIRED_LEVEL`. Rule 1 never discards a possible winner; rule 2 discards a setting that
is in truth no worse with probability at most ``PAIRED_LEVEL`` at each look. A trial runs its
seeds where the best setting did worst first, so the bound rises soonest.

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
from typing import Any

import numpy as np
import optuna
import pandas as pd
import scipy.stats
import scipy.stats.qmc
from optuna.storages.journal import JournalFileBackend
from optuna.trial import TrialState
from tqdm.auto import tqdm

from simfl._checks import check_bool, check_int
from simfl.results import Results
from simfl.scenario import Scenario
from simfl.sweeps.executors import Executor, make_executor
from simfl.sweeps.fingerprint import fingerprint
from simfl.sweeps.grid import Case, ranges_text
from simfl.sweeps.run import sweep
from simfl.sweeps.store import Store
from simfl.tuning.advice import advise
from simfl.tuning.measures import Constraint, Measure
from simfl.tuning.outcome import Evaluation, TuneInterrupted, TuneOutcome
from simfl.tuning.space import (
    Choice,
    Float,
    Int,
    Knob,
    apply,
    check_knobs,
    distribution,
    label,
    value_of,
)

__all__ = ["STUDY_DIR", "check_search", "startup_trials", "tune"]

#: The folder of a store that holds its searches (journals and outcomes).
STUDY_DIR = "tuning"
#: Trial attribute marking a trial left running by a search that was killed.
_ABANDONED = "simfl:abandoned"
_MAX_SEEDS = 1000
#: The constraint every trial carries: the seeds on which its target was missed (0: none).
_REACHED = "simfl:target-missed"
#: Paired pruning looks only after this many seeds of a trial.
PAIRED_MIN_SEEDS = 3
#: One-sided level of the paired t-test that prunes a clearly worse trial.
PAIRED_LEVEL = 0.01


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


def check_search(
    base: Scenario,
    knobs: Mapping[str, Knob],
    objective: Measure | Sequence[Measure],
    constraints: Iterable[Constraint],
) -> tuple[tuple[Measure, ...], tuple[Constraint, ...]]:
    """Refuse knobs, objectives and constraints that runs of ``base`` cannot take.

    The checks :func:`tune` makes before any run (also made by ``simfl tune`` before it
    prints what will run); returns the objectives and constraints as tuples.

    Raises
    ------
    ValueError
        Naming the knob, measure or constraint and why.
    """
    check_knobs(base, knobs)
    objectives = _objectives(objective)
    for m in objectives:
        m.check(base)
    checked = tuple(constraints)
    for c in checked:
        if not isinstance(c, Constraint):
            raise ValueError(f"tune constraints must be tuning.Constraint objects, got {c!r}")
        c.measure.check(base)
    return objectives, checked


def _digest(results: Results) -> str:
    """A fingerprint of what a run recorded (its rounds and jobs, by value), to spot twins."""
    h = hashlib.sha256()
    for frame in (results.rounds, results.clients):
        h.update("\x1f".join(map(str, frame.columns)).encode())
        h.update(pd.util.hash_pandas_object(frame, index=False).to_numpy().tobytes())
    return h.hexdigest()[:16]


@dataclasses.dataclass
class _Runner:
    """Runs settings over seeds through :func:`simfl.sweep`, remembering what it ran."""

    base: Scenario
    knobs: Mapping[str, Knob]
    store: Store | None
    executor: Executor  # made with the search's workers and threads
    batch: int
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


def startup_trials(n_knobs: int, trials: int) -> int:
    """Trials drawn from the scrambled Sobol sequence before TPE takes over.

    Two per knob plus two, at most ten and at most half the trials, at least two: enough to
    see the range of every knob once or twice before the model steers.
    """
    return max(2, min(10, 2 + 2 * n_knobs, trials // 2))


def _sampler(search_seed: int, done: int) -> optuna.samplers.TPESampler:
    """TPE for the trial after ``done`` finished ones, seeded by both.

    So a resumed search draws what the uninterrupted one would have.
    """
    seed = int.from_bytes(
        hashlib.sha256(f"simfl-tune/{search_seed}/{done}".encode()).digest()[:4], "little"
    )
    return optuna.samplers.TPESampler(
        seed=seed, n_startup_trials=0, multivariate=True, constant_liar=False
    )


def _sobol(knobs: Mapping[str, Knob], search_seed: int, index: int, n: int) -> dict[str, Any]:
    """Point ``index`` of ``n`` of a scrambled Sobol sequence over the knobs' box.

    A real knob maps the unit interval onto its range (on a log scale if asked), an integer
    knob onto its steps and a choice onto its options, each in equal shares.
    """
    u = scipy.stats.qmc.Sobol(len(knobs), scramble=True, seed=search_seed).random(
        1 << max(1, (n - 1).bit_length())
    )[index]
    params: dict[str, Any] = {}
    for x, (path, knob) in zip(u, knobs.items(), strict=True):
        if isinstance(knob, Float):
            lo, hi = (
                (math.log(knob.low), math.log(knob.high)) if knob.log else (knob.low, knob.high)
            )
            v = lo + float(x) * (hi - lo)
            params[path] = min(max(math.exp(v) if knob.log else v, knob.low), knob.high)
        elif isinstance(knob, Int):
            if knob.log:
                v = math.exp(math.log(knob.low) + float(x) * math.log((knob.high + 1) / knob.low))
                params[path] = min(int(v), knob.high)
            else:
                steps = (knob.high - knob.low) // knob.step + 1
                params[path] = knob.low + min(int(float(x) * steps), steps - 1) * knob.step
        else:
            labels = knob.labels()
            params[path] = labels[min(int(float(x) * len(labels)), len(labels) - 1)]
    return params


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


def _incumbent(
    study: optuna.Study, objectives: Sequence[Measure], directions: Sequence[str]
) -> optuna.trial.FrozenTrial | None:
    """The best feasible complete trial with a finite value (one objective), else ``None``."""
    if len(objectives) != 1:
        return None
    best = [
        t
        for t in study.get_trials(deepcopy=False, states=(TrialState.COMPLETE,))
        if t.user_attrs.get("feasible", False) and math.isfinite(t.values[0])
    ]
    if not best:
        return None
    sign = 1.0 if directions[0] == "minimize" else -1.0
    return min(best, key=lambda t: (sign * t.values[0], t.number))


def _hopeless(
    bounds: Sequence[float | None],
    seeds: Sequence[int],
    values: Sequence[float],
    study: optuna.Study,
    objectives: Sequence[Measure],
    directions: Sequence[str],
) -> bool:
    """Whether the trial cannot win (a bound) or is clearly worse (paired evidence).

    *Bound*: a feasible finished trial is at least as good as the trial's optimistic bounds,
    so at best it ties. *Paired evidence* (one objective): on the seeds run so far (at least
    :data:`PAIRED_MIN_SEEDS`), the trial is worse than the best setting on the same seeds by a
    one-sided paired t-test at level :data:`PAIRED_LEVEL` (common random numbers make the
    paired differences small and steady, so a clearly worse setting shows it in a few seeds).
    """
    top = _incumbent(study, objectives, directions)
    if all(b is not None for b in bounds):
        b = [float(v) for v in bounds if v is not None]
        if top is not None and not _better(b[0], top.values[0], directions[0]):
            return True
        if len(directions) > 1:
            front = [
                list(t.values)
                for t in study.get_trials(deepcopy=False, states=(TrialState.COMPLETE,))
                if t.user_attrs.get("feasible", False) and all(map(math.isfinite, t.values))
            ]
            if any(_dominates(v, b, directions) or v == b for v in front):
                return True
    if top is None or len(values) < PAIRED_MIN_SEEDS:
        return False
    theirs = dict(
        zip(top.user_attrs["seeds"], top.user_attrs[f"per_seed:{objectives[0].name}"], strict=True)
    )
    sign = 1.0 if directions[0] == "minimize" else -1.0
    diffs = np.array(
        [sign * (v - theirs[s]) for s, v in zip(seeds, values, strict=False) if s in theirs]
    )
    if diffs.size < PAIRED_MIN_SEEDS or not np.isfinite(diffs).all():
        return False
    mean = float(diffs.mean())
    sd = float(diffs.std(ddof=1))
    if sd == 0.0:
        return mean > 0.0
    t = mean / (sd / math.sqrt(diffs.size))
    return t > float(scipy.stats.t.ppf(1.0 - PAIRED_LEVEL, diffs.size - 1))


def tune(
    base: Scenario | Case,
    knobs: Mapping[str, Knob],
    objective: Measure | Sequence[Measure],
    *,
    constraints: Sequence[Constraint] = (),
    seeds: Iterable[int] = range(3),
    trials: int = 30,
    max_runs: int | None = None,
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
    max_runs
        A budget of runs: no trial starts unless the runs the finished trials used (their
        seeds up to where they stopped) plus one trial's seeds fit in it. ``None``: no budget
        but ``trials``. With several workers a pruned trial may have run up to ``workers - 1``
        seeds past where it stopped; those runs are stored (and found again if the setting
        comes back) but not counted.
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
    objectives, constraints = check_search(base, knobs, objective, constraints)
    seed_list = _seeds("seeds", seeds)
    if not seed_list:
        raise ValueError("tune seeds must list at least one seed")
    trials = check_int("tune trials", trials, low=1, high=100_000)
    if max_runs is not None:
        max_runs = check_int("tune max_runs", max_runs, low=len(seed_list))
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
            again = _asked(t, knobs)
            if again is not None:
                opt.enqueue_trial(again, skip_if_exists=False)

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
        startup = startup_trials(len(knobs), trials)
        bar = tqdm(total=trials, disable=not progress, desc="tune", unit="trial")
        try:
            done = sum(_is_done(t) for t in opt.get_trials(deepcopy=False))
            bar.update(min(done, trials))
            while done < trials:
                if max_runs is not None and _used(opt, len(seed_list)) + len(seed_list) > max_runs:
                    break
                opt.sampler = _sampler(search_seed, done)
                waiting = opt.get_trials(deepcopy=False, states=(TrialState.WAITING,))
                if done < startup and not waiting:
                    opt.enqueue_trial(_sobol(knobs, search_seed, done, startup))
                trial = opt.ask(dists)
                _evaluate(opt, trial, runner, seed_list, objectives, constraints, directions, prune)
                done += 1
                bar.update(1)
                _postfix(bar, opt, objectives, directions)
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


def _asked(trial: optuna.trial.FrozenTrial, knobs: Mapping[str, Knob]) -> dict[str, Any] | None:
    """The setting an abandoned trial was asked with, to run it again (``None``: ask anew).

    A search can die after Optuna made the trial but before every parameter was written to the
    journal. A setting the search enqueued (the Sobol start) is kept whole with the trial, so it
    is run again as it was; one the sampler chose is asked of the sampler again, which, reseeded
    for the same finished trials (a failed trial is not among them), chooses it again. Running a
    partial setting instead would draw the missing parameters from another point of the
    sampler's stream, and the trials that follow would differ from an uninterrupted search's.
    """
    fixed = trial.system_attrs.get("fixed_params")
    if isinstance(fixed, dict) and fixed:
        return dict(fixed)
    if set(trial.params) == set(knobs):
        return dict(trial.params)
    return None


def _postfix(
    bar: Any, opt: optuna.Study, objectives: Sequence[Measure], directions: Sequence[str]
) -> None:
    top = _incumbent(opt, objectives, directions)
    if top is not None:
        bar.set_postfix_str(f"best {top.values[0]:.4g}")


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
    seeds = _order(seeds, opt, objectives, directions)
    per_seed: list[list[float]] = [[] for _ in objectives]
    results: list[Results] = []
    stopped: str | None = None  # why the trial stopped before its last seed
    try:
        i = 0
        while i < len(seeds) and stopped is None:
            chunk = seeds[i : i + runner.batch]
            batch = runner.run(params, chunk)
            for res in batch:  # decided after each seed: the same whatever the batch size
                results.append(res)
                for j, m in enumerate(objectives):
                    per_seed[j].append(m.per_run(res))
                k = len(results)
                if any(math.isinf(per_seed[j][-1]) for j in range(len(objectives))):
                    stopped = "missed"  # a target missed: the mean is inf whatever follows
                    break
                if k < len(seeds):
                    bounds = [m.bound(per_seed[j], len(seeds)) for j, m in enumerate(objectives)]
                    if len(objectives) == 1 and bounds[0] is not None:
                        trial.report(bounds[0], step=k)
                    if prune and _hopeless(
                        bounds, seeds[:k], per_seed[0], opt, objectives, directions
                    ):
                        stopped = "pruned"
                        break
            i += len(chunk)
    except RuntimeError as exc:
        trial.set_user_attr("error", str(exc))
        opt.tell(trial, state=TrialState.FAIL)
        return
    trial.set_user_attr("seeds", list(seeds[: len(results)]))
    trial.set_user_attr("digests", [_digest(r) for r in results])
    for j, m in enumerate(objectives):
        trial.set_user_attr(f"per_seed:{m.name}", [float(v) for v in per_seed[j]])
    c_values = [
        c.measure.combine([c.measure.per_run(r) for r in results], results) for c in constraints
    ]
    violations = [c.violation(v) for c, v in zip(constraints, c_values, strict=True)]
    trial.set_user_attr("constraint_values", [float(v) for v in c_values])
    missed = sum(
        any(math.isinf(per_seed[j][i]) for j in range(len(objectives))) for i in range(len(results))
    )
    # what the sampler reads (<= 0: met), each relative to its bound so that they add up
    trial.set_constraint(_REACHED, missed / max(1, len(results)))
    for c, v in zip(constraints, violations, strict=True):
        trial.set_constraint(c.name, v / max(abs(c.bound), 1e-12))
    trial.set_user_attr("max_selected", _max_selected(results))
    values = [m.combine(per_seed[j], results) for j, m in enumerate(objectives)]
    trial.set_user_attr("values", [float(v) for v in values])
    feasible = (
        all(v <= 0 for v in violations)
        and not any(math.isnan(v) for v in values)
        and stopped is None
    )
    trial.set_user_attr("feasible", feasible)
    if stopped == "pruned":
        trial.set_user_attr("pruned_at", len(results))
        opt.tell(trial, state=TrialState.PRUNED)
        return
    if any(math.isnan(v) for v in values):
        trial.set_user_attr("error", "the objective is not defined for these runs (NaN)")
        opt.tell(trial, state=TrialState.FAIL)
        return
    if stopped == "missed":  # the sampler sees what the runs showed at least, infeasible
        told = [
            m.combine(
                [
                    m.censored(r) if math.isinf(v) else v
                    for v, r in zip(per_seed[j], results, strict=True)
                ],
                results,
            )
            for j, m in enumerate(objectives)
        ]
        trial.set_user_attr("missed", True)
        opt.tell(trial, told)
        return
    opt.tell(trial, values)


def _order(
    seeds: Sequence[int],
    opt: optuna.Study,
    objectives: Sequence[Measure],
    directions: Sequence[str],
) -> list[int]:
    """The seeds in the order a trial runs them: where the best setting did worst, first.

    Under common random numbers a seed that was slow for the best setting tends to be slow
    for the others, so running it first lifts the pruning bound soonest. The combined value of
    a trial that runs every seed does not depend on the order; only where a hopeless one stops.
    """
    top = _incumbent(opt, objectives, directions)
    if top is None:
        return list(seeds)
    sign = 1.0 if directions[0] == "minimize" else -1.0
    values = dict(
        zip(top.user_attrs["seeds"], top.user_attrs[f"per_seed:{objectives[0].name}"], strict=True)
    )
    return sorted(seeds, key=lambda s: (-sign * values.get(s, 0.0), seeds.index(s)))


def _used(opt: optuna.Study, n_seeds: int) -> int:
    """Runs the finished trials used (their seeds up to where they stopped)."""
    return sum(
        len(t.user_attrs.get("seeds", [])) if t.state != TrialState.FAIL else n_seeds
        for t in opt.get_trials(deepcopy=False)
        if _is_done(t)
    )


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
        used=_used(opt, len(seeds)),
    )
