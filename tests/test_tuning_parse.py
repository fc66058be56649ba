"""The text forms of knobs, measures and constraints (``simfl tune``'s flags)."""

from __future__ import annotations

import math

import pytest

pytest.importorskip("optuna")

from simfl.tuning import (
    Choice,
    Constraint,
    EnergyToTarget,
    Final,
    Float,
    Int,
    Jain,
    RoundTime,
    SimTime,
    TimeToTarget,
    UpdateShare,
    UpdatesPerHour,
)
from simfl.tuning.parse import (
    parse_constraint,
    parse_knob,
    parse_knobs,
    parse_measure,
    parse_value,
)


@pytest.mark.parametrize(
    ("text", "path", "knob"),
    [
        ("policy.seconds=1:60", "policy.seconds", Float(1.0, 60.0)),
        ("policy.seconds=1:60:log", "policy.seconds", Float(1.0, 60.0, log=True)),
        ("algorithm.lr=1e-3:0.5:log", "algorithm.lr", Float(1e-3, 0.5, log=True)),
        ("x=-2.5:2.5", "x", Float(-2.5, 2.5)),
        ("policy.count=5..50", "policy.count", Int(5, 50)),
        ("policy.count=5..50:5", "policy.count", Int(5, 50, step=5)),
        ("policy.count=1..64:log", "policy.count", Int(1, 64, log=True)),
        (" rounds = -3..3 ", "rounds", Int(-3, 3)),
        ("policy.partial=False,True", "policy.partial", Choice([False, True])),
        ("policy.count=None,5,10", "policy.count", Choice([None, 5, 10])),
        ("a.b=0.5,2,fast,'7'", "a.b", Choice([0.5, 2, "fast", "7"])),
    ],
)
def test_knob_forms(text, path, knob):
    assert parse_knob(text) == (path, knob)


def test_choice_values_keep_their_types():
    _, knob = parse_knob("p=None,true,False,3,-4,2.5,1e-3,inf,text")
    assert isinstance(knob, Choice)
    values = knob.values()
    assert values[:5] == (None, True, False, 3, -4)
    assert [type(v) for v in values] == [type(None), bool, bool, int, int, float, float, float, str]
    assert values[5:8] == (2.5, 1e-3, math.inf) and values[8] == "text"
    assert parse_value("nan") == "nan"  # not a number a choice could compare
    assert parse_value('"None"') == "None"


def test_a_choice_from_the_scenario_file():
    fleets = {"small": object(), "big": object()}
    path, knob = parse_knob("fleet=@FLEETS", {"FLEETS": fleets, "N": 3})
    assert path == "fleet" and isinstance(knob, Choice)
    assert knob.labels() == ("small", "big") and knob.values() == tuple(fleets.values())


@pytest.mark.parametrize(
    ("text", "names", "words"),
    [
        ("policy.seconds", None, ["--knob must be PATH=SPEC", "PATH=LOW:HIGH"]),
        ("policy.seconds=", None, ["--knob must be PATH=SPEC"]),
        ("=1:2", None, ["--knob must be PATH=SPEC"]),
        ("policy..seconds=1:2", None, ["path must be dotted field names"]),
        ("policy.seconds=5", None, ["one value is not a range or a choice", "PATH=A,B,C"]),
        ("policy.seconds=a:60", None, ["--knob policy.seconds", "LOW of LOW:HIGH", "'a'"]),
        ("policy.seconds=1:60:ln", None, ["LOW:HIGH or LOW:HIGH:log"]),
        ("policy.seconds=1:2:3:log", None, ["LOW:HIGH or LOW:HIGH:log"]),
        ("policy.seconds=60:1", None, ["--knob policy.seconds=60:1", "Float.high"]),
        ("policy.seconds=0:1:log", None, ["log scale"]),
        ("policy.count=1.5..10", None, ["LOW of LOW..HIGH must be an integer"]),
        ("policy.count=1..x", None, ["HIGH of LOW..HIGH must be an integer"]),
        ("policy.count=1..10:2.5", None, ["STEP of LOW..HIGH:STEP"]),
        ("policy.count=1..10:4", None, ["multiple of step"]),
        ("policy.count=0..10:log", None, ["log scale"]),
        ("policy.count=10..1", None, ["Int.high"]),
        ("policy.partial=True,", None, ["none of them empty"]),
        ("policy.partial=1,1", None, ["repeat"]),
        ("fleet=@FLEETS", None, ["defines no 'FLEETS'"]),
        ("fleet=@FLEETS", {"FLEETS": [1, 2]}, ["FLEETS in the scenario file is a list"]),
        ("fleet=@FLEETS", {"FLEETS": {"a": 1}}, ["at least two options"]),
        ("fleet=@1x", None, ["@NAME must name a dict"]),
    ],
)
def test_knob_errors_name_the_option_and_the_forms(text, names, words):
    with pytest.raises(ValueError) as info:
        parse_knob(text, names)
    message = str(info.value)
    assert message.startswith("--knob"), message
    for word in words:
        assert word in message, (word, message)


def test_a_knob_given_twice_is_refused():
    knobs = parse_knobs(["policy.seconds=1:2", "policy.count=1..3"])
    assert list(knobs) == ["policy.seconds", "policy.count"]
    with pytest.raises(ValueError, match=r"--knob policy.count is given twice"):
        parse_knobs(["policy.count=1..3", "policy.count=2..4"])


@pytest.mark.parametrize(
    ("text", "measure"),
    [
        ("time:distance<=1e-3", TimeToTarget("distance", below=1e-3)),
        ("time:distance<0.5", TimeToTarget("distance", below=0.5)),
        ("time:accuracy>=0.8", TimeToTarget("accuracy", above=0.8)),
        ("time:accuracy>0.8", TimeToTarget("accuracy", above=0.8)),
        ("energy:distance<=0.01", EnergyToTarget("distance", below=0.01)),
        ("energy:accuracy>=0.9", EnergyToTarget("accuracy", above=0.9)),
        ("updates_per_hour", UpdatesPerHour()),
        ("final:accuracy", Final("accuracy")),
        ("round_time", RoundTime(0.95)),
        ("round_time:0.5", RoundTime(0.5)),
        ("jain", Jain("groups")),
        ("jain:groups", Jain("groups")),
        ("jain:devices", Jain("devices")),
        ("share:slow", UpdateShare("slow")),
        ("sim_time", SimTime()),
        (" sim_time ", SimTime()),
    ],
)
def test_measure_forms(text, measure):
    assert parse_measure(text) == measure


@pytest.mark.parametrize(
    ("text", "words"),
    [
        ("speed", ["--objective must be a measure", "'speed'", "time:METRIC<=X", "sim_time"]),
        ("time", ["time needs a target"]),
        ("time:distance", ["needs a target METRIC<=X or METRIC>=X"]),
        ("time:<=0.1", ["names no metric"]),
        ("time:distance<=small", ["the target must be a number", "'small'"]),
        ("energy:distance=1", ["needs a target"]),
        ("final", ["final needs a metric", "final:METRIC"]),
        ("final:", ["final needs a metric"]),
        ("share", ["share needs a group", "share:GROUP"]),
        ("jain:clients", ["jain:groups or jain:devices"]),
        ("round_time:high", ["the quantile Q must be a number"]),
        ("round_time:1.5", ["RoundTime.q"]),
        ("updates_per_hour:3", ["updates_per_hour takes no argument"]),
        ("sim_time:x", ["sim_time takes no argument"]),
    ],
)
def test_measure_errors_name_the_option(text, words):
    with pytest.raises(ValueError) as info:
        parse_measure(text)
    message = str(info.value)
    assert message.startswith("--objective"), message
    for word in words:
        assert word in message, (word, message)


@pytest.mark.parametrize(
    ("text", "constraint"),
    [
        ("round_time:0.95<=60", Constraint(RoundTime(0.95), at_most=60.0)),
        ("round_time<=60", Constraint(RoundTime(0.95), at_most=60.0)),
        ("jain:groups>=0.8", Constraint(Jain("groups"), at_least=0.8)),
        ("jain>0.8", Constraint(Jain("groups"), at_least=0.8)),
        ("share:slow>=0.1", Constraint(UpdateShare("slow"), at_least=0.1)),
        ("sim_time<=3600", Constraint(SimTime(), at_most=3600.0)),
        ("sim_time < 3600", Constraint(SimTime(), at_most=3600.0)),
        (
            "time:accuracy>=0.8<=500",
            Constraint(TimeToTarget("accuracy", above=0.8), at_most=500.0),
        ),
        ("time:distance<1e-3<=500", Constraint(TimeToTarget("distance", below=1e-3), at_most=500)),
        ("energy:distance<=0.01<=2e4", Constraint(EnergyToTarget("distance", below=0.01), 2e4)),
        ("updates_per_hour>=100", Constraint(UpdatesPerHour(), at_least=100.0)),
        ("final:accuracy>=0.7", Constraint(Final("accuracy"), at_least=0.7)),
    ],
)
def test_constraint_forms_the_last_comparison_bounds(text, constraint):
    assert parse_constraint(text) == constraint


@pytest.mark.parametrize(
    ("text", "words"),
    [
        ("sim_time", ["--constraint must be a measure and a bound", "MEASURE<=NUMBER"]),
        ("sim_time<=", ["the bound must be a number"]),
        ("sim_time<=an hour", ["the bound must be a number", "'an hour'"]),
        ("<=5", ["names no measure"]),
        ("speed<=5", ["--constraint must be a measure", "'speed'"]),
        ("jain>=1.5", ["can never be met"]),
        ("round_time<=-1", ["can never be met"]),
        ("time:distance<=1e-3", ["names the target, then the bound", "time:METRIC<=X<=BOUND"]),
    ],
)
def test_constraint_errors_name_the_option(text, words):
    with pytest.raises(ValueError) as info:
        parse_constraint(text)
    message = str(info.value)
    assert message.startswith("--constraint"), message
    for word in words:
        assert word in message, (word, message)
