"""Collection rules for the whole tree (``tests/conftest.py`` holds the shared fixtures).

Where mypyc's builds of ``simfl.engine.flows._native.MODULES`` run, pytest cannot import
their ``.py`` files for ``--doctest-modules`` (the module it gets is the extension); their
doctests run on the Python sources in ``tests/test_native.py``'s subprocess instead.
"""

from simfl.engine.flows import _native

collect_ignore = [m.replace(".", "/") + ".py" for m in _native.MODULES] if _native.ACTIVE else []
