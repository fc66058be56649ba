"""What the ``simfl`` command reports as one ``error: ...`` line rather than a traceback."""

from __future__ import annotations

import errno
import sys

__all__ = ["ENVIRONMENT_ERRNOS", "UsageError", "fail"]

#: Errors of the environment rather than of simfl: reported in one line by ``simfl``.
ENVIRONMENT_ERRNOS = frozenset(
    getattr(errno, name)
    for name in [
        "EACCES",
        "EPERM",
        "EROFS",
        "ENOSPC",
        "EDQUOT",
        "EFBIG",
        "EIO",
        "ENOENT",
        "ENOTDIR",
        "EISDIR",
        "EEXIST",
        "ENOTEMPTY",
        "ENAMETOOLONG",
        "ELOOP",
        "EMFILE",
        "ENFILE",
        "EXDEV",
    ]
    if hasattr(errno, name)
)


class UsageError(Exception):
    """A command that cannot be carried out as given; ``simfl`` prints it as one line."""


def fail(message: str) -> int:
    """Print ``error: message`` to standard error; the exit status of a user's error (2)."""
    print(f"error: {message}", file=sys.stderr)
    return 2
