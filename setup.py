"""Build: simfl's hot pure-Python modules compiled with mypyc where this machine can.

The shared links' arithmetic (``simfl/network/sharing.py``), the flow networks
(``simfl/engine/links.py``) and the flow-round loop (``simfl/engine/flowround.py``) are plain,
fully typed Python; mypyc (part of mypy) compiles them to C extensions that run the same
operations about twice as fast. They stay valid Python: without a C compiler, or with
``SIMFL_PURE_PYTHON=1`` set while installing, the build skips them and simfl runs them as
Python, with the same results bit for bit (``tests/test_native.py``). ``simfl/_native.py``
decides at import which of the two runs (stale or missing builds run as Python).

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
#: the compiled modules (keep in step with ``simfl/_native.py``)
NATIVE = ("simfl/network/sharing.py", "simfl/engine/links.py", "simfl/engine/flowround.py")
#: what the build compiled: one ``sha256 path`` line per module (read by ``simfl/_native.py``)
RECORD = ROOT / "simfl" / "_native_sources.txt"


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
