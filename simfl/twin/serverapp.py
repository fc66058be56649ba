"""The twin's ServerApp: the scenario's policy deciding, Flower's SuperNodes doing the jobs.

It runs inside Flower's ``flwr-serverapp`` process, reads the :class:`Plan` the twin wrote, and
plays the scenario's synchronous policy round after round with the same decision objects as
:func:`simfl.run`: the policy plans each round from a :class:`~simfl.engine.view.PolicyView`,
every job's download, compute and upload seconds come from the same keyed draws
(:func:`simfl.engine.jobs.plan_jobs`), and the algorithm aggregates the arrived updates with
an :class:`~simfl.outcome.Outcome` built from what the server really saw. Only the clock
differs: instants are wall-clock seconds since the first round began, divided by the time
scale, minus the time the server spent evaluating (evaluation is off the clock, as in
:func:`simfl.run`).

A round's ``time`` is when its new model exists (after the aggregation, as :func:`simfl.run`
records it with a :class:`simfl.Server`); late and cancelled jobs end when the round closed.
The rows it writes have the columns of :func:`simfl.run`'s, plus, in ``clients``, what the real
system added: ``dispatch`` (seconds from the server's send to the ClientApp's start: Flower's
polling and process start), ``return_`` (from the ClientApp's reply to the server's receipt)
and ``overrun`` (training that outlasted the emulated compute time).
"""

from __future__ import annotations

import math
import os
import pickle
import sys
import time
import traceback
from dataclasses import dataclass
from pathlib import Path
from typing import Any, cast

import numpy as np
from flwr.app import ConfigRecord, Context, Message, MessageType, RecordDict
from flwr.serverapp import Grid, ServerApp

from simfl.engine.jobs import plan_jobs
from simfl.engine.view import PolicyView
from simfl.outcome import ARRIVED, CANCELLED, DROPPED, LATE, STATUSES, Outcome
from simfl.results import ROUND_COLUMNS, Recorder
from simfl.rng import Streams
from simfl.twin.replies import twin_math

__all__ = ["Plan", "app"]

app = ServerApp()


@dataclass
class Plan:
    """What the twin's ServerApp plays, written by :func:`simfl.twin.twin`."""

    scenario: Any
    scale: float
    result: str
    dead: str
    app: str
    paths: list[str]
    node_timeout: float
    job_timeout: float
    threads: int = 1


class _Env:
    """The wall clock as the policy sees it (``now``, in scenario seconds)."""

    def __init__(self, scale: float) -> None:
        self.scale = scale
        self.t0 = time.time()
        self.paused = 0.0

    def at(self, wall: float) -> float:
        return (wall - self.t0 - self.paused) / self.scale

    @property
    def now(self) -> float:
        return self.at(time.time())


class _NoLinks:
    links = None


class _Ctx:
    """What :class:`PolicyView` reads, filled by the twin's loop."""

    def __init__(self, plan: Plan, data: Any, state: Any, streams: Streams) -> None:
        sc = plan.scenario
        self.round = 0
        self.env = _Env(plan.scale)
        self.fleet = sc.fleet
        self.streams = streams
        self.goals = dict(getattr(sc.task, "goals", {}) or {})
        self.cursor = None
        self.jobs = _NoLinks()
        self.algorithm = sc.algorithm
        self.state = state
        self.data = data
        metrics = tuple(sc.task.metrics) if sc.task is not None else ()
        self.recorder = Recorder(metrics)

    def online(self) -> np.ndarray[Any, Any]:
        return np.arange(self.fleet.size, dtype=np.int64)

    def plan(self, devices: np.ndarray[Any, Any], *, key: int, stage: int) -> Any:
        return plan_jobs(
            self.fleet,
            devices,
            round=key,
            stage=stage,
            t_start=self.env.now,
            work=self.algorithm.work(self.state, devices),
            payload=self.algorithm.payload(self.state),
            streams=self.streams,
        )


def _nodes(grid: Grid, plan: Plan, n: int) -> dict[int, int]:
    """Device -> node id: every SuperNode says its ``partition-id`` (bounded waits)."""
    deadline = time.time() + plan.node_timeout
    ids: list[int] = []
    while len(ids) < n:
        ids = list(grid.get_node_ids())
        if time.time() > deadline:
            raise TimeoutError(
                f"only {len(ids)} of {n} SuperNodes connected within {plan.node_timeout:g} s"
            )
        time.sleep(0.05)
    msgs = [
        Message(RecordDict(), dst_node_id=node, message_type=MessageType.QUERY, group_id="hello")
        for node in ids
    ]
    pending = set(grid.push_messages(msgs))
    devices: dict[int, int] = {}
    while pending:
        for reply in grid.pull_messages(list(pending)):
            pending.discard(reply.metadata.reply_to_message_id)
            if reply.has_error():
                raise RuntimeError(f"a SuperNode failed to say its partition: {reply.error}")
            partition = int(cast(Any, reply.content["simfl"]["partition"]))
            devices[partition] = reply.metadata.src_node_id
        if time.time() > deadline:
            raise TimeoutError(f"SuperNodes did not answer within {plan.node_timeout:g} s")
        time.sleep(0.02)
    missing = sorted(set(range(n)) - set(devices))
    if missing:
        raise RuntimeError(f"no SuperNode has partition-id {missing}")
    return devices


def _dead(plan: Plan) -> dict[int, float]:
    """Devices whose SuperNode died, and when (wall clock), as the twin's watcher wrote."""
    out: dict[int, float] = {}
    folder = Path(plan.dead)
    if folder.is_dir():
        for f in folder.iterdir():
            try:
                out[int(f.name)] = float(f.read_text())
            except (ValueError, OSError):
                continue
    return out


def _play(grid: Grid, plan: Plan) -> dict[str, Any]:
    sc = plan.scenario
    streams = Streams(sc.seed)
    n = sc.fleet.size
    task = sc.task.build(n, streams) if sc.task is not None else None
    alg = sc.algorithm
    state = alg.initial_state(task, streams)
    math_ = twin_math(alg)
    node_of = _nodes(grid, plan, n)
    ctx = _Ctx(plan, task, state, streams)
    view = PolicyView(cast(Any, ctx))
    env = ctx.env
    policy = sc.policy
    pstate = policy.start(view)
    jobs_rows: list[dict[str, Any]] = []
    closes: list[tuple[float, float]] = []  # each round's close and its aggregation's seconds
    rounds_rows: list[dict[str, Any]] = []
    metrics_names = tuple(sc.task.metrics) if sc.task is not None else ()
    initial = alg.evaluate(state, task) if task is not None else {}
    stop_reason = "rounds"
    env.t0 = time.time()
    r = 0
    while True:
        if sc.rounds is not None and r >= sc.rounds:
            stop_reason = "rounds"
            break
        if sc.max_time is not None and env.now >= sc.max_time:
            stop_reason = "max_time"
            break
        ctx.round, ctx.state = r, state
        pstate, rp = policy.plan(pstate, view)
        cohort = np.asarray(rp.cohort, dtype=np.int64)
        devices, repeats = np.unique(cohort, return_counts=True)
        epoch = rp.stage if rp.speed_epoch is None else rp.speed_epoch
        t_round = env.now
        jobs = plan_jobs(
            sc.fleet,
            devices,
            round=r,
            stage=epoch,
            t_start=t_round,
            work=alg.work(state, devices),
            payload=alg.payload(state),
            streams=streams,
        )
        wall_round = time.time()
        deadline_wall = (
            wall_round + rp.deadline * plan.scale if rp.deadline is not None else math.inf
        )
        msgs = []
        for j, d in enumerate(devices):
            content = RecordDict(dict(math_.content(state, int(d), r).items()))
            content["simfl"] = ConfigRecord(
                {
                    "download": float(jobs.download[j]) * plan.scale,
                    "compute": float(jobs.compute[j]) * plan.scale,
                    "upload": float(jobs.upload[j]) * plan.scale,
                    "fail_after": float(jobs.fail_after[j]) * plan.scale,
                    "deadline": deadline_wall,
                    "seed": int(math_.seed(streams, int(d), r)),
                    "app": plan.app,
                    "paths": plan.paths or [""],
                    "device": int(d),
                    "round": r,
                    "threads": plan.threads,
                }
            )
            msgs.append(
                Message(
                    content,
                    dst_node_id=node_of[int(d)],
                    message_type=MessageType.TRAIN,
                    group_id=str(r),
                )
            )
        pushed = time.time()
        ids = list(grid.push_messages(msgs))
        Path(plan.dead).with_name("progress").write_text(str(r))
        job_of = {mid: j for j, mid in enumerate(ids)}
        m = len(devices)
        status = np.full(m, -1, dtype=np.int8)
        t_end = np.full(m, math.nan)
        timing: list[dict[str, Any]] = [{} for _ in range(m)]
        replies: dict[int, Message] = {}
        quota = rp.quota if rp.quota is not None else m
        give_up = pushed + float(jobs.duration.max(initial=0.0)) * plan.scale + plan.job_timeout
        pending = set(ids)
        while pending:
            now_wall = time.time()
            for reply in grid.pull_messages(list(pending)):
                mid = reply.metadata.reply_to_message_id
                pending.discard(mid)
                j = job_of[mid]
                t_end[j] = time.time()
                if reply.has_error():
                    status[j] = DROPPED
                    timing[j] = {"error": str(reply.error.reason)}
                    continue
                tm: dict[str, Any] = dict(reply.content["simfl"])
                timing[j] = tm
                if tm.get("error"):
                    status[j] = DROPPED
                elif tm["status"] == "arrived":
                    status[j] = ARRIVED
                    del reply.content["simfl"]
                    replies[j] = reply
                elif tm["status"] == "dropped":
                    status[j] = DROPPED
                    t_end[j] = float(tm["t_done"])
                else:  # stopped at the deadline: recorded late when the round closes
                    pass
            dead = _dead(plan)
            for mid in list(pending):
                j = job_of[mid]
                if int(devices[j]) in dead:
                    pending.discard(mid)
                    status[j] = DROPPED
                    t_end[j] = max(dead[int(devices[j])], pushed)
                    timing[j] = {"error": "the SuperNode died"}
            n_arrived = int(np.count_nonzero(status == ARRIVED))
            if n_arrived >= quota or now_wall >= deadline_wall:
                break
            if not pending:
                break
            if now_wall > give_up:
                for mid in list(pending):
                    j = job_of[mid]
                    status[j] = DROPPED
                    t_end[j] = now_wall
                    timing[j] = {"error": f"no reply within {plan.job_timeout:g} s of its end"}
                break
            time.sleep(0.01)
        close_wall = min(time.time(), deadline_wall)
        running = status < 0
        stopped_by = LATE if rp.deadline is not None and close_wall >= deadline_wall else CANCELLED
        status[running] = stopped_by
        t_end[running] = close_wall
        close = env.at(close_wall)
        arrived = np.flatnonzero(status == ARRIVED)
        job_start = np.full(m, env.at(pushed))
        ends = np.array([env.at(float(t)) for t in t_end])
        outcome = Outcome(
            round=r,
            stage=rp.stage,
            t_start=t_round,
            time=close,
            devices=devices,
            status=status,
            job_start=job_start,
            job_end=ends,
            staleness=np.where(status == ARRIVED, 0.0, math.nan),
            repeats=repeats if (repeats > 1).any() else None,
            work=jobs.work,
        )
        counts = np.bincount(status, minlength=4)
        row: dict[str, Any] = {
            "round": r,
            "stage": rp.stage,
            "t_start": t_round,
            "time": close,
            "duration": close - t_round,
            "status": "ok" if counts[ARRIVED] else "empty",
            "n_selected": m,
            "n_arrived": int(counts[ARRIVED]),
            "n_dropped": int(counts[DROPPED]),
            "n_late": int(counts[LATE]),
            "n_cancelled": int(counts[CANCELLED]),
            "bytes_down": float(jobs.size_down.sum()),
            "bytes_up": float(jobs.size_up[arrived].sum()),
            "staleness_mean": 0.0 if counts[ARRIVED] else math.nan,
            "train_loss": math.nan,
        }
        if arrived.size:
            updates = math_.updates(state, devices[arrived], [replies[int(j)] for j in arrived])
            if updates.loss is not None:
                row["train_loss"] = float(np.mean(updates.loss))
            reps = repeats[arrived]
            if (reps > 1).any():
                updates = updates.repeat(reps)
            state = alg.aggregate(state, updates, outcome)
        ready = env.now  # the new model exists now (simfl.run's ``time``)
        closes.append((close, ready - close))
        row["time"], row["duration"] = ready, ready - t_round
        ctx.state = state
        pstate = policy.observe(pstate, outcome, view)
        for j in range(m):
            tm = timing[j]
            t_recv = float(tm.get("t_recv", math.nan))
            t_comp = float(tm.get("t_compute", math.nan))
            t_up = float(tm.get("t_upload", math.nan))
            t_done = float(tm.get("t_done", math.nan))
            jobs_rows.append(
                {
                    "round": r,
                    "stage": rp.stage,
                    "device": int(devices[j]),
                    "status": STATUSES[int(status[j])],
                    "t_start": env.at(pushed),
                    "t_end": ends[j],
                    "download": (t_comp - t_recv) / plan.scale,
                    "compute": (t_up - t_comp) / plan.scale,
                    "upload": (t_done - t_up) / plan.scale,
                    "work": float(jobs.work[j]),
                    "bytes_down": float(jobs.size_down[j]),
                    "bytes_up": float(jobs.size_up[j]) if status[j] == ARRIVED else 0.0,
                    "staleness": 0.0 if status[j] == ARRIVED else math.nan,
                    "dispatch": (t_recv - pushed) / plan.scale,
                    "return_": (t_end[j] - t_done) / plan.scale
                    if status[j] == ARRIVED
                    else math.nan,
                    "overrun": float(tm.get("overrun", math.nan)) / plan.scale,
                    "planned_download": float(jobs.download[j]),
                    "planned_compute": float(jobs.compute[j]),
                    "planned_upload": float(jobs.upload[j]),
                    "error": str(tm.get("error", "")),
                }
            )
        r += 1
        last = (sc.rounds is not None and r >= sc.rounds) or (
            sc.max_time is not None and env.now >= sc.max_time
        )
        if task is not None and (r % sc.eval_every == 0 or last or sc.target is not None):
            t_eval = time.time()
            metrics = alg.evaluate(state, task)
            env.paused += time.time() - t_eval
            row.update({k: float(metrics.get(k, math.nan)) for k in metrics_names})
        else:
            row.update({k: math.nan for k in metrics_names})
        rounds_rows.append(row)
        if sc.target is not None and sc.target.reached(row):
            stop_reason = "target"
            break
    return {
        "rounds": rounds_rows,
        "clients": jobs_rows,
        "initial_metrics": initial,
        "stop_reason": stop_reason,
        "sim_time": env.now,
        "metrics": list(metrics_names),
        "nodes": {int(k): int(v) for k, v in node_of.items()},
        "round_columns": list(ROUND_COLUMNS),
        "closes": [c for c, _ in closes],
        "aggregation": [a for _, a in closes],
    }


@app.main()
def main(grid: Grid, context: Context) -> None:
    """Play the plan; write the rows, or the error, where the twin waits for them."""
    path = str(context.run_config["plan"])
    for folder in str(context.run_config.get("paths", "")).split(os.pathsep):
        if folder and folder not in sys.path:
            sys.path.insert(0, folder)  # where the scenario's own modules import from
    with open(path, "rb") as f:
        plan: Plan = pickle.load(f)
    out: dict[str, Any]
    try:
        out = {"ok": True, **_play(grid, plan)}
    except BaseException as err:  # recorded for the twin, which raises it
        out = {
            "ok": False,
            "error": f"{type(err).__name__}: {err}",
            "trace": traceback.format_exc(),
        }
    tmp = Path(plan.result + ".tmp")
    tmp.write_bytes(pickle.dumps(out))
    tmp.replace(plan.result)
