"""How a run is played: the :class:`Playback` interface and the one place it is chosen.

See :mod:`simfl.engine.playbacks.base` for what each playback does and when it applies, and
:mod:`simfl.engine.playbacks.choose` for the table the choice is made from.
"""

from simfl.engine.playbacks.base import Playback, ServerLoop
from simfl.engine.playbacks.choose import PLAYBACKS, choose

__all__ = ["PLAYBACKS", "Playback", "ServerLoop", "choose"]
