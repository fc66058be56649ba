"""Build: the shared-link package's hot modules compiled with mypyc where this machine can.

The modules of ``simfl/engine/flows/`` that play shared links (the links' arithmetic, the flow
networks, the flow-round loop; every module of that package but its ``__init__``, its build
choice and its NumPy progressive filling) are plain, fully typed Python; mypyc (part of mypy)
compiles them to C extensions that run the same operations about twice as fast. They are the
only compiled modules. They stay valid Python: without a C compiler, or with
``SIMFL_PURE_PYTHON=1`` set while installing, the build skips them and simfl runs them as
Python, with the same results bit for bit (``tests/test_native.py``).
``simfl/engine/flows/_native.py`` decides when the package is imported which of the two runs
(stale or missing builds run as Python).

Floating-point contraction is turned off (``-ffp-contract=off``) so that no compiler fuses a
multiply and an add into one rounding: the compiled arithmetic is the interpreter's.
"""

from __future__ import annotations

import hashlib
import os
import sys
from pathlib import Path

from setuptools import setup

ROOT = Path(__file__).resolve().parent
#: the compiled modules (keep in step with ``simfl/engine/flows/_native.py``)
NATIVE = (
    "simfl/engine/flows/sharedlink.py",
    "simfl/engine/flows/calendar.py",
    "simfl/engine/flows/links.py",
    "simfl/engine/flows/reference.py",
    "simfl/engine/flows/network.py",
    "simfl/engine/flows/flowround.py",
)
#: what the build compiled: one ``sha256 path`` line per module (read by ``_native.py``)
RECORD = ROOT / "simfl" / "engine" / "flows" / "_native_sources.txt"


#: the commands that build extensions (metadata commands, which pip runs first, need none)
BUILDS = {"build", "build_ext", "editable_wheel", "bdist_wheel", "develop", "install"}


def _extensions() -> list:  # type: ignore[type-arg]
    if not BUILDS.intersection(sys.argv[1:]):
        return []  # egg_info, dist_info, sdist: no need to run mypyc (about 20 s) for them
    RECORD.unlink(missing_ok=True)
    if os.environ.get("SIMFL_PURE_PYTHON", "") not in ("", "0"):
        return []
    try:
        from mypyc.build import mypycify
    except ImportError:  # no mypy in the build environment: pure Python
        return []
    os.chdir(ROOT)  # mypyc reads the project's mypy settings and writes build/ here
    # the build environment holds mypy, numpy and simpy (pyproject's build requirements), not
    # the rest of simfl's dependencies: the modules imported beyond these three are analysed
    # without reporting their errors, and libraries missing there are Any (as everywhere, so
    # every build compiles the same code)
    flags = ["--ignore-missing-imports", "--follow-imports=silent"]
    extensions = mypycify([*NATIVE, *flags], opt_level="3", group_name="simfl_native")
    for ext in extensions:
        ext.extra_compile_args = [*ext.extra_compile_args, "-ffp-contract=off"]
        ext.optional = True  # no compiler: installed without it (simfl runs the Python)
    RECORD.write_text(
        "".join(f"{hashlib.sha256((ROOT / p).read_bytes()).hexdigest()} {p}\n" for p in NATIVE)
    )
    return extensions


setup(ext_modules=_extensions())
