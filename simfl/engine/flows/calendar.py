"""The next completions of a network's shared links, kept in one heap.

A network of many links (a hierarchy of many edges) asks at every flow event when its next
completion is and, at a wake-up, which links it is due on. :class:`Calendar` answers both at
``O(log L)`` per link that changed instead of a pass over all ``L`` links.
"""

from __future__ import annotations

import heapq
import math

from simfl.engine.flows.sharedlink import Member, SharedLink, wake_up

__all__ = ["Calendar"]


class Calendar:
    """The next completions of a network's links: the earliest, and the links due, by a heap.

    Every link of the network is filed once (:meth:`add`; its order is the order links are
    asked in, :meth:`due`). A link whose ``next_at`` changes puts itself on :attr:`changed`
    (its ``filing``); the calendar pushes those onto its heap the next time it is
    asked, and an entry whose time is no longer its link's ``next_at`` is dropped when it
    comes to the top. So :meth:`earliest` is ``min(link.next_at for link in links)`` and
    :meth:`due` the links with ``next_at <= at``, each at ``O(log L)`` per link that changed
    rather than a pass over all ``L`` links (a hierarchy of many edges has many).
    """

    def __init__(self) -> None:
        #: every link filed, in order
        self.links: list[SharedLink] = []
        #: links whose next completion changed since the calendar last looked
        self.changed: list[SharedLink] = []
        #: ``(next_at, index, push, link)``: entries of one link at one time differ in ``push``
        self._heap: list[tuple[float, int, int, SharedLink]] = []
        self._pushes = 0

    def add(self, link: SharedLink) -> None:
        """File ``link`` (once), after every link filed before it."""
        link.filing = self.changed
        link.index = len(self.links)
        self.links.append(link)
        if not link.listed:  # re-filed at the next look
            link.listed = True
            self.changed.append(link)

    def _file(self) -> None:
        """Push the changed links' next completions.

        Where many changed (a cloud's tree solve moves every edge's level) or the heap is
        mostly stale, it is built again from every link at once instead.
        """
        heap = self._heap
        changed = self.changed
        if 4 * len(changed) > len(self.links) or len(heap) > 4 * len(self.links) + 64:
            for link in changed:
                link.listed = False
            heap[:] = [
                (link.next_at, link.index, 0, link)
                for link in self.links
                if link.next_at < math.inf
            ]
            heapq.heapify(heap)
        else:
            push = heapq.heappush
            for link in changed:
                link.listed = False
                t = link.next_at
                if t < math.inf:
                    self._pushes += 1
                    push(heap, (t, link.index, self._pushes, link))
        changed.clear()

    def earliest(self) -> float:
        """``min(link.next_at for link in links)`` (``inf``: nothing pending)."""
        if self.changed:
            self._file()
        heap = self._heap
        while heap:
            t, _, _, link = heap[0]
            if link.next_at == t:
                return t
            heapq.heappop(heap)
        return math.inf

    def due(self, at: float) -> list[SharedLink]:
        """The links with ``next_at <= at`` (a finite time), in the order they were filed.

        Their entries leave the heap and the links go on :attr:`changed` (their next
        completions are filed again at the next look, changed or not).
        """
        if self.changed:
            self._file()
        heap = self._heap
        out: list[SharedLink] = []
        pop = heapq.heappop
        while heap and heap[0][0] <= at:
            t, _, _, link = pop(heap)
            if link.next_at == t and not link.listed:
                link.listed = True
                self.changed.append(link)
                out.append(link)
        if len(out) > 1:
            out.sort(key=_index)
        return out

    def wake_up(self, at: float, now: float) -> list[Member]:
        """Take out the members done at the completion scheduled for ``at`` (at ``now``).

        :func:`~simfl.engine.flows.sharedlink.wake_up` of the links :meth:`due` at ``at``.
        """
        return wake_up(self.due(at), self.links, at, now)


def _index(link: SharedLink) -> int:
    return link.index
