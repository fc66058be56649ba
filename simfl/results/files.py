"""Reading a file that may come from someone else: a regular file, never a link, never too big.

A results folder or a store may be received from another person or machine, so what looks
like ``meta.json`` may be a symbolic link (to ``/dev/zero``, or out of the folder), a FIFO
(opening it for reading waits for a writer for ever), a device or a huge file. Every reader of
simfl's files opens them through :func:`open_regular`: without following a link
(``O_NOFOLLOW``), without waiting on a FIFO (``O_NONBLOCK``), then checks the *opened* file's
own status (``fstat``: a regular file of at most ``cap`` bytes), so what is checked is what is
read. :func:`read_regular` reads the whole file that way, and never more than ``cap`` bytes even
if it grows meanwhile.

>>> import tempfile
>>> from pathlib import Path
>>> folder = Path(tempfile.mkdtemp())
>>> (folder / "a.json").write_text("{}")
2
>>> read_regular(folder / "a.json", cap=16)
b'{}'
>>> (folder / "link.json").symlink_to(folder / "a.json")
>>> try:
...     read_regular(folder / "link.json", cap=16)
... except UnreadableFileError as exc:
...     print(exc.problem)
is a symbolic link; simfl never follows links
"""

from __future__ import annotations

import contextlib
import errno
import os
import stat
from collections.abc import Iterator
from pathlib import Path
from typing import BinaryIO

__all__ = ["JSON_CAP", "PARQUET_CAP", "UnreadableFileError", "open_regular", "read_regular"]

#: The most bytes simfl reads of one of its JSON files (``meta.json``, ``run.json``, ...).
JSON_CAP = 16 * 2**20
#: The most bytes simfl reads of one Parquet file.
PARQUET_CAP = 4 * 2**30


class UnreadableFileError(ValueError):
    """A file that is not read: missing, a link, not a regular file, too large or unreadable.

    The message starts with the file's path; ``problem`` is the message without it.
    """

    def __init__(self, path: Path, problem: str) -> None:
        super().__init__(f"{path} {problem}")
        self.path = path
        self.problem = problem


@contextlib.contextmanager
def open_regular(
    path: Path, cap: int, *, reader: str = "simfl"
) -> Iterator[tuple[BinaryIO, os.stat_result]]:
    """Open ``path`` for reading if it is a regular file of at most ``cap`` bytes.

    Parameters
    ----------
    path
        The file.
    cap
        The most bytes it may hold.
    reader
        Who reads, for the messages (``"simfl"``, ``"a store"``).

    Yields
    ------
    tuple
        The open binary file and its status (``os.fstat``).

    Raises
    ------
    UnreadableFileError
        If it is missing, a symbolic link, a FIFO, a device, a folder, larger than ``cap`` or
        cannot be opened.
    """
    flags = os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_NONBLOCK", 0)
    if not hasattr(os, "O_NOFOLLOW") and os.path.islink(path):
        raise UnreadableFileError(path, f"is a symbolic link; {reader} never follows links")
    try:
        fd = os.open(path, flags | getattr(os, "O_CLOEXEC", 0) | getattr(os, "O_BINARY", 0))
    except FileNotFoundError:
        raise UnreadableFileError(path, "is missing") from None
    except OSError as exc:
        if exc.errno in (errno.ELOOP, errno.EMLINK) and os.path.islink(path):
            problem = f"is a symbolic link; {reader} never follows links"
            raise UnreadableFileError(path, problem) from None
        raise UnreadableFileError(path, f"cannot be read ({exc.strerror or exc})") from None
    with os.fdopen(fd, "rb", buffering=0) as file:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode):
            raise UnreadableFileError(
                path, f"is {_kind(info.st_mode)}, not a regular file; it is not read"
            )
        if info.st_size > cap:
            raise UnreadableFileError(
                path, f"has {info.st_size} bytes, more than the {cap} {reader} reads"
            )
        yield file, info


def read_regular(path: Path, cap: int, *, reader: str = "simfl") -> bytes:
    """The bytes of ``path``, opened with :func:`open_regular` (at most ``cap`` of them).

    Raises
    ------
    UnreadableFileError
        As :func:`open_regular`; also if the file grew past ``cap`` while it was read.
    """
    with open_regular(path, cap, reader=reader) as (file, _):
        data = file.read(cap + 1)
    if len(data) > cap:
        raise UnreadableFileError(
            path, f"grew past the {cap} bytes {reader} reads while it was read"
        )
    return data


def _kind(mode: int) -> str:
    kinds = [
        (stat.S_ISDIR, "a folder"),
        (stat.S_ISFIFO, "a FIFO"),
        (stat.S_ISCHR, "a character device"),
        (stat.S_ISBLK, "a block device"),
        (stat.S_ISSOCK, "a socket"),
    ]
    return next((name for test, name in kinds if test(mode)), "a special file")
