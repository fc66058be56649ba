"""Independent, reproducible random streams keyed by ``(seed, purpose, *keys)``.

Every random number simfl draws is a pure function of the scenario seed, a purpose string
(``"compute/round"``, ``"dropout"``, ``"data/x"``, ...) and integer keys such as the device and
the round. Nothing depends on the order in which draws happen, so

* adding a device to a fleet does not change what the other devices draw,
* a policy that starts fewer jobs does not shift the draws of the jobs it does start,
* computing only the accepted updates (lazily) gives the same numbers as computing all of them.

Two interfaces share these keys:

``Streams.uniform`` / ``Streams.normal``
    Vectorised, counter-based draws: the keys broadcast like numpy arrays and each element is
    hashed independently (a SplitMix64 chain), so a cohort's draws come from one array
    expression. Normals use the exact inverse normal CDF (``scipy.special.ndtri``).
``Streams.generator``
    A ``numpy.random.Generator`` seeded by ``SeedSequence(seed, spawn_key=(purpose, *keys))``
    for code that wants a classic generator (sampling without replacement, shuffles).

This departs from DESIGN.md's "streams come from SeedSequence" in one respect: element-wise
hashing is what lets a cohort of any size draw its keyed numbers in one vectorised call.
"""

from __future__ import annotations

import hashlib
from functools import lru_cache

import numpy as np
from numpy.typing import ArrayLike, NDArray
from scipy.special import ndtri

from simfl._checks import check_int

__all__ = ["UNIFORM_MAX", "Streams"]

_M1 = np.uint64(0xBF58476D1CE4E5B9)
_M2 = np.uint64(0x94D049BB133111EB)
_GOLDEN = np.uint64(0x9E3779B97F4A7C15)
_FINAL = np.uint64(0xD1B54A32D192ED03)
_S30, _S27, _S31, _S11 = (np.uint64(s) for s in (30, 27, 31, 11))
_ONE = np.uint64(1)
_TWO_M53 = 2.0**-53

#: The largest value :meth:`Streams.uniform` returns, the float just below 1 (``1 - 2**-53``).
#: ``(k + 0.5) * 2**-53`` rounds to exactly 1.0 for the top 53-bit integer ``k``, so uniforms
#: are clamped here: the interval stays open and no inverse CDF is ever evaluated at 1 (an
#: infinite draw for every unbounded distribution). Only that one value in ``2**53`` changes.
#: :mod:`simfl.dists` bounds each distribution's largest draw by its ``ppf`` at this value.
UNIFORM_MAX = float(np.nextafter(1.0, 0.0))


def _mix(z: NDArray[np.uint64]) -> NDArray[np.uint64]:
    """SplitMix64 finaliser: a bijection of uint64 with strong avalanche."""
    z = z ^ (z >> _S30)  # a new array: the rest works in place
    z *= _M1
    z ^= z >> _S27
    z *= _M2
    z ^= z >> _S31
    return z


_MASK = (1 << 64) - 1
_M1_INT, _M2_INT, _GOLDEN_INT, _FINAL_INT = (int(c) for c in (_M1, _M2, _GOLDEN, _FINAL))


def _mix_int(z: int) -> int:
    """:func:`_mix` on a Python int in ``[0, 2**64)``."""
    z = ((z ^ (z >> 30)) * _M1_INT) & _MASK
    z = ((z ^ (z >> 27)) * _M2_INT) & _MASK
    return z ^ (z >> 31)


@lru_cache(maxsize=4096)
def _purpose_id(purpose: str) -> int:
    """Stable 64-bit identifier of a purpose string (not Python's salted ``hash``)."""
    return int.from_bytes(hashlib.blake2b(purpose.encode(), digest_size=8).digest(), "little")


class Streams:
    """Random streams of one run, keyed by purpose and integer keys.

    Parameters
    ----------
    seed
        The scenario seed, a non-negative integer.

    Examples
    --------
    >>> s = Streams(0)
    >>> u = s.uniform("compute/round", [0, 1, 2], 7)   # devices 0..2 in round 7
    >>> bool(((0 < u) & (u < 1)).all())
    True
    >>> float(s.uniform("compute/round", 1, 7)) == float(u[1])
    True
    """

    __slots__ = ("_seed", "_seed_int", "_seed_key")

    def __init__(self, seed: int) -> None:
        self._seed = check_int("seed", seed, low=0, high=2**63 - 1)
        with np.errstate(over="ignore"):
            self._seed_key = _mix(np.asarray(np.uint64(self._seed) + _GOLDEN, dtype=np.uint64))
        self._seed_int = int(self._seed_key)

    @property
    def seed(self) -> int:
        """The seed this object was built from."""
        return self._seed

    def _hash(self, purpose: str, keys: tuple[ArrayLike, ...]) -> NDArray[np.uint64]:
        # The chain over scalar keys runs on Python ints (exactly the same arithmetic modulo
        # 2**64, without numpy's per-scalar overhead); array keys switch to numpy.
        z: int | NDArray[np.uint64] = _mix_int(self._seed_int ^ _purpose_id(purpose))
        with np.errstate(over="ignore"):
            for key in keys:
                if isinstance(z, int) and isinstance(key, (int, np.integer)):
                    if isinstance(key, bool) or key < 0:
                        raise (ValueError if key < 0 else TypeError)(
                            "random stream keys must be non-negative integers"
                        )
                    z = _mix_int((z + _GOLDEN_INT * (int(key) + 1)) & _MASK)
                    continue
                k = np.asarray(key)
                if k.dtype.kind not in "iu":
                    raise TypeError(f"random stream keys must be integers, got dtype {k.dtype}")
                if k.dtype.kind == "i" and k.size and k.min() < 0:
                    raise ValueError("random stream keys must be non-negative")
                if isinstance(z, int):
                    z = _mix(np.uint64(z) + _GOLDEN * (k.astype(np.uint64) + _ONE))
                elif k.ndim == 0:  # a scalar key after an array one: its term as a Python int
                    z = _mix(z + np.uint64((_GOLDEN_INT * (int(k) + 1)) & _MASK))
                else:
                    z = _mix(z + _GOLDEN * (k.astype(np.uint64) + _ONE))
            if isinstance(z, int):
                return np.asarray(np.uint64(_mix_int(z ^ _FINAL_INT)))
            return _mix(z ^ _FINAL)

    def uniform(self, purpose: str, *keys: ArrayLike) -> NDArray[np.float64]:
        """Uniform draws on the open interval (0, 1), one per element of the broadcast keys.

        Every draw lies in ``[2**-54, UNIFORM_MAX]``.

        Parameters
        ----------
        purpose
            What the numbers are for; different purposes give independent streams.
        *keys
            Non-negative integer scalars or arrays; they broadcast against each other.

        Returns
        -------
        numpy.ndarray
            Float64 array with the broadcast shape of the keys (0-d if all keys are scalars).
        """
        z = self._hash(purpose, keys)
        u = ((z >> _S11).astype(np.float64) + 0.5) * _TWO_M53
        return np.minimum(u, UNIFORM_MAX)

    def normal(self, purpose: str, *keys: ArrayLike) -> NDArray[np.float64]:
        """Standard normal draws, one per element of the broadcast keys (inverse-CDF method)."""
        return np.asarray(ndtri(self.uniform(purpose, *keys)), dtype=np.float64)

    def generator(self, purpose: str, *keys: int) -> np.random.Generator:
        """A numpy Generator for ``(seed, purpose, *keys)``; keys are non-negative integers."""
        spawn = (
            _purpose_id(purpose),
            *(
                k if type(k) is int and k >= 0 else check_int("random stream key", k, low=0)
                for k in keys
            ),
        )
        return np.random.default_rng(np.random.SeedSequence(self._seed, spawn_key=spawn))
