"""The fields of a stored run's ``run.json``, checked one by one before anything reads them.

A store may come from elsewhere (copied, received, edited by hand), so every field a reader
uses is checked for its type and range when the record is read: a record that fails is a run
that cannot be read (listed by :meth:`simfl.Store.check`, left out of what is read), never a
traceback in ``simfl show``, ``report`` or ``sweep``. Fields this simfl does not know (written
by a later one) are kept as they are and not used.

Each entry of :data:`FIELDS` says whether the field is required and what it may hold; ``None``
is allowed for the optional ones that record nothing (an error of a run that did not fail, the
git revision outside a checkout, the simulated time of a run that raised before it started).
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

__all__ = ["FIELDS", "STATUSES", "Field", "problem"]

#: Status of a stored run: ``done`` (the run ended normally) or ``failed`` (it raised, recorded
#: an error, or its worker was lost; ``error`` says why).
STATUSES = ("done", "failed")
#: A SHA-256 in hexadecimal.
_HEX64 = re.compile(r"[0-9a-f]{64}")


@dataclass(frozen=True)
class Field:
    """What one field of ``run.json`` may hold.

    Attributes
    ----------
    valid
        Whether a value is acceptable (``None`` is handled by ``optional``).
    expected
        The valid values, in words (used in the error).
    required
        Whether every record must have it.
    optional
        Whether ``None`` is accepted.
    """

    valid: Callable[[Any], bool]
    expected: str
    required: bool = False
    optional: bool = True


def _is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _is_number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def _is_str(value: Any) -> bool:
    return isinstance(value, str)


def _is_scalar(value: Any) -> bool:
    return value is None or isinstance(value, (str, int, float, bool))


def _nonnegative_int(value: Any) -> bool:
    return _is_int(value) and value >= 0


def _seconds(value: Any) -> bool:
    return _is_number(value) and (math.isnan(value) or value >= 0)


def _labels(value: Any) -> bool:
    return isinstance(value, dict) and all(
        isinstance(k, str) and _is_scalar(v) for k, v in value.items()
    )


def _sizes(value: Any) -> bool:
    return isinstance(value, dict) and all(
        isinstance(k, str) and _nonnegative_int(v) for k, v in value.items()
    )


def _names(value: Any) -> bool:
    return isinstance(value, list) and all(isinstance(v, str) for v in value)


def _goals(value: Any) -> bool:
    return isinstance(value, dict) and all(
        isinstance(k, str) and isinstance(v, str) for k, v in value.items()
    )


def _sha256(value: Any) -> bool:
    return isinstance(value, str) and _HEX64.fullmatch(value) is not None


#: The fields of ``run.json`` that simfl reads, and what each may hold.
FIELDS: Mapping[str, Field] = {
    "run_id": Field(_is_str, "a string (the run folder's name)", required=True, optional=False),
    "status": Field(
        lambda v: v in STATUSES, " or ".join(map(repr, STATUSES)), required=True, optional=False
    ),
    "name": Field(_is_str, "a string (the scenario's name)", required=True, optional=False),
    "seed": Field(
        lambda v: _is_int(v) and 0 <= v < 2**63,
        "an integer in [0, 2**63)",
        required=True,
        optional=False,
    ),
    "position": Field(_nonnegative_int, "an integer >= 0", optional=False),
    "labels": Field(
        _labels, "an object of JSON scalars (string, number, true/false, null)", optional=False
    ),
    "fingerprint": Field(_is_str, "a string"),
    "has_results": Field(lambda v: isinstance(v, bool), "true or false", optional=False),
    "files": Field(_sizes, "an object of byte sizes (integers >= 0)", optional=False),
    "meta_sha256": Field(_sha256, "a SHA-256 (64 hexadecimal digits)", optional=False),
    "error": Field(_is_str, "a string or null"),
    "n_devices": Field(_nonnegative_int, "an integer >= 0"),
    "n_rounds": Field(_nonnegative_int, "an integer >= 0"),
    "algorithm_name": Field(_is_str, "a string"),
    "policy_name": Field(_is_str, "a string"),
    "metrics": Field(_names, "a list of strings"),
    "goals": Field(_goals, 'an object of strings ("min" or "max")'),
    "sim_time": Field(_seconds, "a number >= 0"),
    "host_seconds": Field(_seconds, "a number >= 0"),
    "stop_reason": Field(_is_str, "a string"),
    "started": Field(_is_str, "a string (an ISO 8601 time)"),
    "finished": Field(_is_str, "a string (an ISO 8601 time)"),
    "host": Field(_is_str, "a string"),
    "simfl_version": Field(_is_str, "a string"),
    "git_revision": Field(_is_str, "a string"),
    "python": Field(_is_str, "a string"),
}


def problem(record: Mapping[str, Any]) -> str:
    """What is wrong with a ``run.json`` object, in words; an empty string if nothing.

    Names the missing required fields, or the first field whose value is not valid, with the
    value and what would be.
    """
    missing = [k for k, f in FIELDS.items() if f.required and k not in record]
    if missing:
        return f"lacks the field(s) {', '.join(missing)}"
    for key, spec in FIELDS.items():
        if key not in record:
            continue
        value = record[key]
        if value is None and spec.optional:
            continue
        if not spec.valid(value):
            return f'has "{key}": {_short(value)}; it must be {spec.expected}'
    return ""


def _short(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 80 else f"{text[:60]}...{text[-12:]}"
