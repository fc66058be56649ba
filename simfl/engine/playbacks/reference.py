"""The reference playback: every job a SimPy process (see :mod:`simfl.engine.playbacks.base`)."""

from __future__ import annotations

from simfl.engine.playbacks.base import Playback

__all__ = ["ReferencePlayback"]


class ReferencePlayback(Playback):
    """Every job a SimPy process; synchronous rounds wait for their jobs' events.

    What ``simfl.run(..., batched=False)`` plays, and what a run plays where no faster
    playback applies.
    """

    name = "reference"
