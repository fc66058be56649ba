"""Seeds on the command line: ``--seeds 0-9``, ``1,4,7`` or a mix."""

from __future__ import annotations

__all__ = ["DEFAULT_SEEDS", "MAX_SEEDS", "parse_seeds"]

#: Seeds of ``simfl sweep`` for scenarios without a seed axis when ``--seeds`` is not given.
DEFAULT_SEEDS = "0-4"
#: The most seeds ``simfl sweep --seeds`` takes (each seed is one run of every scenario).
MAX_SEEDS = 100_000


def parse_seeds(text: str) -> list[int]:
    """Seeds from ``"0-9"``, ``"1,4,7"`` or a mix such as ``"0-3,10"``.

    Raises
    ------
    ValueError
        If ``text`` does not look like that (seeds are >= 0), a range is empty, or it lists
        more than :data:`MAX_SEEDS` seeds (counted before any list is made).
    """
    ranges: list[range] = []
    try:
        for part in text.split(","):
            lo, _, hi = part.strip().partition("-")
            ranges.append(range(int(lo), int(hi or lo) + 1))
    except ValueError:
        raise ValueError(f"--seeds must look like 0-9 or 1,4,7, got {text!r}") from None
    if any(not r for r in ranges):
        raise ValueError(f"--seeds ranges must go from low to high, like 0-9, got {text!r}")
    count = sum(len(r) for r in ranges)
    if count > MAX_SEEDS:
        raise ValueError(
            f"--seeds {text} lists {count:,} seeds; a sweep takes at most {MAX_SEEDS:,} "
            f"(each seed is one run of every scenario)"
        )
    return [seed for r in ranges for seed in r]
