"""Collection rules for the whole tree (``tests/conftest.py`` holds the shared fixtures).

Where mypyc's builds of ``simfl.engine.flows._native.MODULES`` run, pytest cannot import
their ``.py`` files for ``--doctest-modules`` (the module it gets is the extension); their
doctests run on the Python sources in ``tests/test_native.py``'s subprocess instead. Without
Flower (the ``flower`` extra) ``simfl.flower`` cannot be imported, so its modules are not
collected either (``tests/test_flower_adapter.py`` skips, saying why).
"""

import importlib.util

from simfl.engine.flows import _native

collect_ignore = [m.replace(".", "/") + ".py" for m in _native.MODULES] if _native.ACTIVE else []
if importlib.util.find_spec("flwr") is None:
    collect_ignore_glob = ["simfl/flower/*"]
