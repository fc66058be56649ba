"""The ``simfl`` command line: ``simfl run``, ``sweep``, ``tune``, ``report``, ``show``, ``store``.

The manual is ``docs/cli.md``; ``simfl CMD --help`` says what each command does. One module per
command under :mod:`simfl.cli.commands`; scenario files are read by
:mod:`simfl.cli.scenario_file`, seeds by :mod:`simfl.cli.seeds`.
"""

from simfl.cli.commands.tune import TUNE_KEYS
from simfl.cli.entry import main, parser
from simfl.cli.errors import UsageError
from simfl.cli.scenario_file import load_cases, load_scenarios
from simfl.cli.seeds import DEFAULT_SEEDS, MAX_SEEDS, parse_seeds
from simfl.report.recorded import parse_target

__all__ = [
    "DEFAULT_SEEDS",
    "MAX_SEEDS",
    "TUNE_KEYS",
    "UsageError",
    "load_cases",
    "load_scenarios",
    "main",
    "parse_seeds",
    "parse_target",
    "parser",
]
