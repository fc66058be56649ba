"""One shared link played as processor sharing with per-flow caps, at O(log n) per flow event.

The pure computation behind the fast shared links of :mod:`simfl.engine.flows.network` (no
SimPy). A :class:`SharedLink` of capacity ``C`` carries flows ``i`` that are each also limited by a
cap ``c_i`` of their own (the smallest capacity of the rest of their path). Their max-min fair
rates are water-filling: the level ``L`` solves ``sum_i min(c_i, L) = C``; flows with
``c_i < L`` (*capped*) get ``c_i``, the others (*level* flows) get ``L``. This is exactly what
progressive filling (:func:`~simfl.engine.flows.maxmin.max_min_rates`) gives for such flows.

Between flow events every rate is constant, so the state is kept without touching every flow:

* all level flows move at the same rate ``L``, so the link keeps a *virtual clock* ``V`` (bytes
  served to each level flow so far); a level flow stores ``key = V + remaining`` once and
  finishes when ``V`` reaches it. A heap orders them by ``key``, another by cap (the next to
  become capped when ``L`` rises);
* a capped flow stores its remaining bytes ``rem0`` at the time ``t0`` it was last touched and
  finishes at ``t0 + rem0 / c``; a heap orders them by that time, another by cap (largest
  first: the next to rejoin the level if ``L`` falls).

Two levels nest (an edge server's link under the cloud's, :meth:`SharedLink.attach`): a flow
then gets ``min(c_i, L_e, L)``, its edge's own level ``L_e`` and the cloud's level ``L``; the
cloud solves for ``L`` with each child either *saturated* (taking exactly its capacity) or
taking ``sum min(c_i, L)`` of its flows, in one water-filling over both levels
(:meth:`SharedLink._rebalance_tree`). The cloud keeps the sums that give ``L`` and its
children in four heaps (by the levels at which each would change class), each child taken in
again only when it changes; an unsaturated child's level members (a *follower*'s: they all
move at ``L``) are keyed on the cloud's *follower clock* ``W`` (bytes served at ``L``; the
child's own clock is ``W`` less an offset fixed when it starts following), and a heap of the
followers gives their next completion. So a change of ``L`` moves no child, and a step of the
solve is heap work on the children that move only.

A flow event moves the level once and moves only the flows whose class changes (each at most twice
per event): ``O(log n)`` per flow that changes, ``O(log n)`` otherwise. Across the links of a
network a :class:`~simfl.engine.flows.calendar.Calendar` keeps their next completions in a heap (the
earliest, and the links due at a wake-up, at ``O(log L)`` per link that changed, not a pass over all
``L`` links), and a parent keeps the sum of its children's takes that
:meth:`SharedLink._settle_alone` tests (refreshed for the children that changed), so a hierarchy of
many edge links costs no pass over its edges per flow event, whether its cloud link binds or not.
Heap entries are invalidated lazily (a version number per flow). The sum of the capped flows' caps
is kept incrementally and recomputed exactly (``math.fsum``) every so many changes, so it does not
drift.

>>> link = SharedLink(10.0)
>>> a, b = Member(100.0, cap=2.0), Member(100.0, cap=float("inf"))
>>> link.add(a, 100.0, 0.0); link.add(b, 100.0, 0.0)
>>> link.rate(a), link.rate(b)
(2.0, 8.0)
"""

from __future__ import annotations

import heapq
import math
from itertools import count

__all__ = ["TOLERANCE", "Member", "SharedLink", "wake_up"]

#: relative: a flow with less than this share of its bytes left is complete
TOLERANCE = 1e-9
_seq = count()


class Member:
    """A flow's place on a :class:`SharedLink` (its bookkeeping; subclassed by flows)."""

    __slots__ = ("cap", "capped", "key", "link", "rem0", "seq", "size", "t0", "tol", "ver")

    def __init__(self, size: float, cap: float = math.inf) -> None:
        self.size = float(size)
        #: bytes left that count as none (:meth:`done_by`), worked out once
        self.tol = TOLERANCE * max(self.size, 1.0)
        #: its own limit (bytes/s) besides the shared link
        self.cap = float(cap)
        self.link: SharedLink | None = None
        self.capped = False
        self.key = 0.0  # level flows: the virtual clock at which it finishes
        self.t0 = 0.0  # capped flows: when ``rem0`` was measured
        self.rem0 = 0.0
        self.ver = 0  # bumped on every change: older heap entries are stale
        self.seq = 0  # admission order (ties are finished in this order)

    def done_by(self, remaining: float) -> bool:
        """Whether ``remaining`` bytes left count as none (relative tolerance ``1e-9``)."""
        return remaining <= self.tol


Entry = tuple[float, int, int, Member]


class SharedLink:
    """Flows sharing one link of capacity ``capacity`` (``inf``: each flow gets its cap)."""

    def __init__(self, capacity: float) -> None:
        self.capacity = float(capacity)
        self.level = math.inf  # L, the level flows' rate
        #: when the next member finishes if nothing changes (kept by every change)
        self.next_at = math.inf
        #: the link above this one on its flows' paths (an edge's cloud link), if contended
        self.parent: SharedLink | None = None
        self.children: list[SharedLink] = []
        #: a child whose own level is below its parent's: it takes its whole capacity
        self.saturated = False
        self.clock = 0.0  # V, bytes served to each level flow
        self.since = 0.0  # when V was last advanced
        self.n_level = 0
        self.capped: dict[Member, None] = {}
        self.capped_sum = 0.0
        self._changes = 0
        self._by_key: list[Entry] = []  # level flows by finish key
        self._by_low: list[Entry] = []  # level flows by cap, smallest first
        self._by_end: list[Entry] = []  # capped flows by finish time
        self._by_high: list[Entry] = []  # capped flows by cap, largest first (negated)
        self._bounds_at: tuple[float, float, float] | None = None  # :meth:`_bounds`, if known
        #: the list its calendar re-files changed links from (:attr:`Calendar.changed
        #: <simfl.engine.flows.calendar.Calendar.changed>`; none for a link on its own)
        self.filing: list[SharedLink] | None = None
        self.index = 0  # its place in the calendar (links are asked in this order)
        self.listed = False  # on the calendar's list of links to re-file
        #: a parent's children's takes as its last settle saw them (see :meth:`_fits`)
        self.slot = 0  # its place among its parent's children
        self.take_stale = False  # on its parent's list of children whose take may differ
        self._takes: list[float] = []
        self._take_sum = 0.0
        self._take_changes = 0
        self._stale_takes: list[SharedLink] = []
        self._children_capacity = 0.0
        self._takes_bounded = True
        #: a child on its parent's list of children changed since its tree was last solved
        self.dirty = False
        self.bver = 0  # the version of its entries in its parent's heaps (see _take_in)
        self.touched = False  # changed in the tree solve under way
        #: what its parent's sums last counted for it: fixed rate, level members, members
        self.seen_fixed = 0.0
        self.seen_slope = 0
        self.seen_count = 0
        #: a *follower* (an unsaturated child with level members under a parent that binds):
        #: its level members move at its parent's level, so its clock is its parent's
        #: follower clock less ``offset``, and its ``clock``, ``since`` and ``level`` hold only
        #: as of its last :meth:`_sync`
        self.follows = False
        self.offset = 0.0
        self.fver = 0  # the version of its entry in its parent's follower heap
        self.wkey = 0.0  # that entry's key: its first level member's key on the follower clock
        #: a parent's side of the tree solve (:meth:`_rebalance_tree`)
        self.fclock = 0.0  # W, bytes served to each follower's level members
        self.fsince = 0.0  # when W was last advanced
        self.n_follow = 0
        self._follow: list[tuple[float, int, int, SharedLink]] = []  # followers by wkey
        self._dirty: list[SharedLink] = []
        self._touched: list[SharedLink] = []
        self.t_fixed = 0.0  # sum of the children's fixed rates (capacity or capped caps)
        self.t_slope = 0  # level members of the unsaturated children
        self.t_count = 0  # members of the children
        self._t_changes = 0
        #: the children, by (key, slot, bver): saturated by own level (largest first,
        #: negated); unsaturated by own level, by smallest level member's cap, and by largest
        #: capped member's cap (negated)
        self._sat_own: list[tuple[float, int, int, SharedLink]] = []
        self._uns_own: list[tuple[float, int, int, SharedLink]] = []
        self._uns_low: list[tuple[float, int, int, SharedLink]] = []
        self._uns_high: list[tuple[float, int, int, SharedLink]] = []

    # ----------------------------------------------------------------- queries
    def __len__(self) -> int:
        return self.n_level + len(self.capped)

    def rate(self, m: Member) -> float:
        """The current rate of member ``m`` (bytes/s)."""
        if m.capped:
            return m.cap
        if self.follows:
            assert self.parent is not None
            return self.parent.level
        return self.level

    def remaining(self, m: Member, now: float) -> float:
        """Bytes ``m`` has left at ``now`` (not before the last event)."""
        if m.capped:
            return m.rem0 - m.cap * (now - m.t0)
        return m.key - self._clock_at(now)

    def next_finish(self) -> float:
        """When the next member finishes if nothing changes (``inf``: none; computed)."""
        t = math.inf
        top = self._top(self._by_key)
        if top is not None and self.follows:  # on the parent's follower clock
            parent = self.parent
            assert parent is not None
            t = parent.fsince + (top.key + self.offset - parent.fclock) / parent.level
        elif top is not None and self.level < math.inf:
            t = self.since + (top.key - self.clock) / self.level
        top = self._top(self._by_end)
        if top is not None:
            t = min(t, top.t0 + top.rem0 / top.cap)
        return t

    def due(self, now: float) -> bool:
        """Whether :meth:`finished` at ``now`` would take a member out (computed, not done).

        Also ``True`` when a stale heap entry is on top (``finished`` would clear it first).
        Nothing is changed: a link not due need not be finished (nor advanced).
        """
        by_key = self._by_key
        if by_key:
            _, _, ver, top = by_key[0]
            if top.ver != ver or top.link is None:
                return True
            if top.key - self._clock_at(now) <= top.tol:
                return True
        by_end = self._by_end
        if by_end:
            _, _, ver, top = by_end[0]
            if top.ver != ver or top.link is None:
                return True
            if top.rem0 - top.cap * (now - top.t0) <= top.tol:
                return True
        return False

    def finished(self, now: float) -> list[Member]:
        """Members done at ``now`` (within tolerance); the link is advanced to ``now``.

        :meth:`_top`, :meth:`remaining` and :meth:`Member.done_by` inline (the same
        arithmetic: once the link is advanced, a level member's remaining bytes are
        ``key - clock``).
        """
        if self.follows:
            self._sync(now)
        level = self.level  # _advance(now), inline
        if self.n_level and level != math.inf and level != -math.inf:
            self.clock = self.clock + level * (now - self.since)
        self.since = now
        out: list[Member] = []
        pop = heapq.heappop
        by_key = self._by_key
        while by_key:
            _, _, ver, top = by_key[0]
            if top.ver != ver or top.link is None:
                pop(by_key)
                continue
            # remaining(top, now): the link is at ``now``, so _clock_at(now) is the clock
            if not top.key - self.clock <= top.tol:
                break
            # _drop(top) of a level member, inline
            self._bounds_at = None
            if self.parent is not None and not (self.dirty and self.take_stale):
                self._changed()
            top.ver += 1
            self.n_level -= 1
            top.link = None
            if self.n_level == 0:
                self.clock = 0.0
                by_key.clear()
                self._by_low.clear()
            out.append(top)
        by_end = self._by_end
        while by_end:
            _, _, ver, top = by_end[0]
            if top.ver != ver or top.link is None:
                pop(by_end)
                continue
            if not top.rem0 - top.cap * (now - top.t0) <= top.tol:
                break
            self._drop(top)
            out.append(top)
        return out

    # ----------------------------------------------------------------- changes
    def add(self, m: Member, remaining: float, now: float) -> None:
        """Admit ``m`` with ``remaining`` bytes at ``now``, then rebalance the level."""
        nested = self.parent is not None or bool(self.children)
        if not nested and self.capacity == math.inf and not self.n_level and m.cap < math.inf:
            # an unlimited link: every member is capped by its own link. _to_level and the
            # rebalancing's move to the capped class in one step, with the same arithmetic
            # (with no level member the clock is 0.0, so the move's ``key - clock`` is
            # ``remaining``); the level stays ``inf``, the next completion is the earliest end
            self.since = now
            m.link = self
            m.seq = next(_seq)
            self._to_capped(m, remaining, now)
            by_end = self._by_end
            while by_end:  # _top, inline
                _, _, ver, first = by_end[0]
                if first.ver == ver and first.link is not None:
                    self._next(first.t0 + first.rem0 / first.cap)
                    return
                heapq.heappop(by_end)
            return  # pragma: no cover - m itself is on the heap
        # _advance and _to_level with the same arithmetic, inline
        if self.follows:
            self._sync(now)
        level = self.level
        if self.n_level and level != math.inf and level != -math.inf:
            self.clock = self.clock + level * (now - self.since)
        self.since = now
        m.link = self
        m.seq = seq = next(_seq)
        self._bounds_at = None
        if self.parent is not None and not (self.dirty and self.take_stale):
            self._changed()
        m.ver = ver = m.ver + 1
        m.capped = False
        m.key = key = self.clock + remaining
        self.n_level += 1
        heapq.heappush(self._by_key, (key, seq, ver, m))
        heapq.heappush(self._by_low, (m.cap, seq, ver, m))
        if nested:
            self.settle(now)
        else:
            self._rebalance(now)

    def remove(self, m: Member, now: float) -> float:
        """Take ``m`` out at ``now``; return its remaining bytes. Rebalances the level."""
        self._advance(now)
        left = self.remaining(m, now)
        self._drop(m)
        self.settle(now)
        return left

    def pop_first(self, now: float) -> Member:
        """Take out the member that finishes first (rounding left it a hair short at ``now``)."""
        self._advance(now)
        level, capped = self._top(self._by_key), self._top(self._by_end)
        if capped is None or (
            level is not None
            and self.since + (level.key - self.clock) / self.level
            <= capped.t0 + capped.rem0 / capped.cap
        ):
            assert level is not None
            self._drop(level)
            return level
        self._drop(capped)
        return capped

    def settle(self, now: float) -> None:
        """Rebalance after a change of this link's members (also after :meth:`finished`).

        A link with a parent is rebalanced by its parent, which solves both levels, unless
        its own water-filling is the whole solution (:meth:`_settle_alone`).
        """
        parent = self.parent
        if parent is not None:
            if not self._settle_alone(now):
                parent._rebalance_tree(now)
        elif self.children:
            self._rebalance_tree(now)
        else:
            self._rebalance(now)

    def _settle_alone(self, now: float) -> bool:
        """Rebalance a nested link on its own where that is the whole solution; whether it was.

        That is so when the level above does not move (every other link then keeps its
        classes), in two cases, each checked after this link's own water-filling
        (:meth:`_rebalance`, which moves its members in the order the tree's solve would):

        * it was *saturated* and stays so (its own level below its parent's): it takes its
          whole capacity before and after;
        * its parent does not bind (level ``inf``, no level member of its own) and still does
          not: its children's takes, summed as the tree sums them (a child with level members
          saturated, taking its capacity; any other its capped members' caps), fit its
          capacity. Every child then has its own level, as a link on its own.
        """
        parent = self.parent
        assert parent is not None
        free = parent.level == math.inf and not parent.n_level
        if self.saturated:
            self._rebalance(now)
            if self.level < parent.level:  # still saturated
                return True
        elif free:
            self._rebalance(now)
        else:
            return False
        if not free or not parent._fits():
            return False
        self.saturated = self.n_level > 0
        return True

    def attach(self, child: SharedLink) -> None:
        """Make ``child`` a link below this one (two levels at most)."""
        if child.parent is not self:
            child.parent = self
            child.slot = len(self.children)
            self.children.append(child)
            self._takes.append(0.0)
            self._children_capacity += child.capacity
            child.take_stale = child.dirty = False
            child._changed()  # its take is read at the next look, its state at the next solve

    def _fits(self) -> bool:
        """Whether this link's capped members and its children's takes fit its capacity.

        ``capped_sum + take_1 + ... + take_n <= capacity``, summed left to right, a child's
        take being its capacity if it has level members, else its capped members' caps: what
        :meth:`_settle_alone` asks after every change of a child. The takes' sum is kept
        (each child that changed since it was last read is read again) and recomputed every
        ``n + 16`` changes, so it differs from the left-to-right sum by at most about
        ``3 (n + 16) u K`` (``u`` the float64 rounding unit, ``K`` the children's capacities'
        sum) while every take is within its child's capacity (one beyond it sends the
        question to the loop, and the sum is recomputed until none is). Where the kept
        sum is within a relative ``1e-9`` of the capacity (far above that bound for the
        ``n <= 100,000`` children this is used for), the loop over the children answers: the
        answer is always the loop's, to the bit.
        """
        takes = self._takes
        stale = self._stale_takes
        for child in stale:
            child.take_stale = False
            new = child.capacity if child.n_level else child.capped_sum
            if not abs(new) <= child.capacity * (1.0 + 1e-6):
                self._takes_bounded = False
            self._take_sum += new - takes[child.slot]
            takes[child.slot] = new
        self._take_changes += len(stale)
        stale.clear()
        n = len(takes)
        if self._take_changes > n + 16 or not self._takes_bounded:
            total = 0.0
            bounded = True
            for child, take in zip(self.children, takes, strict=True):
                total += take
                bounded = bounded and abs(take) <= child.capacity * (1.0 + 1e-6)
            self._take_sum, self._take_changes, self._takes_bounded = total, 0, bounded
        fixed = self.capped_sum + self._take_sum
        margin = 1e-9 * (self._children_capacity + abs(self.capped_sum) + self.capacity)
        if self._takes_bounded and n <= 100_000 and margin < math.inf:  # (NaN: False)
            if fixed - self.capacity > margin:
                return False
            if self.capacity - fixed > margin:
                return True
        exact = self.capped_sum
        for child in self.children:
            exact += child.capacity if child.n_level else child.capped_sum
        return not exact > self.capacity

    # ----------------------------------------------------------------- internals
    def _next(self, t: float) -> None:
        """Set the next completion; a change is re-filed in the calendar."""
        if t != self.next_at:
            self.next_at = t
            if not self.listed and self.filing is not None:
                self._refile()

    def _refile(self) -> None:
        """Put this link on its calendar's list of links to re-file (once)."""
        assert self.filing is not None
        self.listed = True
        self.filing.append(self)

    def _changed(self) -> None:
        """Put this child on its parent's lists of children that changed (once on each).

        One list is :meth:`_fits`'s (the takes to read again), the other the tree solve's
        (the children whose sums, heap entries and next completion to take in again).
        """
        parent = self.parent
        assert parent is not None
        if not self.take_stale:
            self.take_stale = True
            parent._stale_takes.append(self)
        if not self.dirty:
            self.dirty = True
            parent._dirty.append(self)

    def _clock_at(self, now: float) -> float:
        if self.follows:  # its parent's follower clock at ``now``, less its offset
            parent = self.parent
            assert parent is not None
            return parent._fclock_at(now) - self.offset
        level = self.level
        if self.n_level == 0 or level == math.inf or level == -math.inf:  # isinf, no call
            return self.clock
        return self.clock + level * (now - self.since)

    def _advance(self, now: float) -> None:
        if self.follows:
            self._sync(now)
            return
        self.clock = self._clock_at(now)
        self.since = now

    def _sync(self, now: float) -> None:
        """A follower's clock, time and level at ``now``, from its parent's follower clock."""
        parent = self.parent
        assert parent is not None
        self.clock = parent._fclock_at(now) - self.offset
        self.since = now
        self.level = parent.level

    def _fclock_at(self, now: float) -> float:
        """The follower clock ``W`` at ``now`` (at the level it was last advanced at).

        During a tree solve it has been advanced to ``now`` already, and the level may be the
        new one: it is not read then.
        """
        if now == self.fsince:
            return self.fclock
        return self.fclock + self.level * (now - self.fsince)

    @staticmethod
    def _top(heap: list[Entry]) -> Member | None:
        while heap:
            _, _, ver, m = heap[0]
            if m.ver == ver and m.link is not None:
                return m
            heapq.heappop(heap)
        return None

    def _to_level(self, m: Member, remaining: float) -> None:
        self._bounds_at = None
        if self.parent is not None and not (self.dirty and self.take_stale):
            self._changed()
        m.ver += 1
        m.capped = False
        m.key = self.clock + remaining
        self.n_level += 1
        heapq.heappush(self._by_key, (m.key, m.seq, m.ver, m))
        heapq.heappush(self._by_low, (m.cap, m.seq, m.ver, m))

    def _to_capped(self, m: Member, remaining: float, now: float) -> None:
        self._bounds_at = None
        if self.parent is not None and not (self.dirty and self.take_stale):
            self._changed()
        m.ver += 1
        m.capped = True
        m.t0, m.rem0 = now, remaining
        self.capped[m] = None
        self._add_cap(m.cap)
        heapq.heappush(self._by_end, (now + remaining / m.cap, m.seq, m.ver, m))
        heapq.heappush(self._by_high, (-m.cap, m.seq, m.ver, m))

    def _drop(self, m: Member) -> None:
        """Take ``m`` out of its class (no rebalance)."""
        self._bounds_at = None
        if self.parent is not None and not (self.dirty and self.take_stale):
            self._changed()
        m.ver += 1
        if m.capped:
            del self.capped[m]
            self._add_cap(-m.cap)
        else:
            self.n_level -= 1
        m.link = None
        if self.n_level == 0:
            self.clock = 0.0
            self._by_key.clear()
            self._by_low.clear()

    def _add_cap(self, c: float) -> None:
        self._changes += 1
        if not self.capped:
            self.capped_sum, self._changes = 0.0, 0
            self._by_end.clear()
            self._by_high.clear()
        elif self._changes > len(self.capped) + 16:
            self.capped_sum, self._changes = math.fsum(m.cap for m in self.capped), 0
        else:
            self.capped_sum += c

    def _own_level(self) -> float:
        """The level by this link's own capacity alone (``inf``: no level members)."""
        return (self.capacity - self.capped_sum) / self.n_level if self.n_level else math.inf

    def _rebalance_tree(self, now: float) -> None:
        """Water-filling over both levels, one move at a time (each raises the level).

        The items are this link's own members, each child's members and each child's
        *saturation*: a saturated child (its own level below this link's level ``L``) takes
        exactly its capacity; an unsaturated one takes ``sum min(c_i, L)`` of its members.
        ``L`` solves "all items take this link's capacity" for the current classes; an item
        whose class disagrees with ``L`` is moved (a saturated child is kept in agreement
        with its own level, :meth:`_take_in`), and ``L`` solved again. Every such move
        raises ``L`` (or leaves it alone), whatever the order of the moves, so each item
        changes class at most twice and the classes end as progressive filling's.

        Nothing here passes over the children. The sums that give ``L`` are kept
        (:attr:`t_fixed`, :attr:`t_slope`), and a child that disagrees is found at the top of
        one of four heaps (saturated children by own level, largest first; unsaturated ones
        by own level, by their smallest level member's cap and by their largest capped
        member's cap), each child's entries pushed again when it changes (:meth:`_take_in`:
        the children on :attr:`_dirty`, and those moved here). An unsaturated child's level
        members all move at ``L`` (it is a *follower*): their keys are read on this link's
        follower clock ``W`` (:attr:`fclock`, bytes served at ``L``; the child's clock is
        ``W - offset``), and a heap of the followers by their first member's key gives their
        next completion, so a change of ``L`` moves no child. Only the children that changed
        are settled afterwards (:meth:`_finish_tree`).

        Where this differs from a pass over the children in the same order (the moves'
        order, the sums' rounding, a follower's clock read off ``W``), the results differ
        by rounding only: the tests hold them to progressive filling and to the reference
        network at a relative ``1e-9``.
        """
        self._advance(now)
        level = self.level
        if self.n_follow and level != math.inf and level != -math.inf:  # W at the old level
            self.fclock = self.fclock + level * (now - self.fsince)
        self.fsince = now
        self._take_in_dirty(now)
        capacity = self.capacity
        steps = 0
        while True:
            steps += 1
            if steps > 64 and steps > 64 + 4 * (len(self) + self.t_count):
                break
            fixed = self.capped_sum + self.t_fixed
            slope = self.n_level + self.t_slope
            if slope:
                level = (capacity - fixed) / slope
            else:
                level = math.inf if fixed <= capacity else -math.inf
            if self._move_one(now, level) or self._move_child(now, level):
                continue
            break
        self._finish_tree(now, level)

    def _move_child(self, now: float, level: float) -> bool:
        """One move of a child that disagrees with ``level``; whether one moved.

        A child disagrees when its saturation does not match ``own < level`` (it flips), or,
        unsaturated, when a member's class does not match ``level`` (the member moves). The
        child is taken in again (:meth:`_take_in`).
        """
        first = self._first_child(self._sat_own)
        if first is not None and not -first[0] < level:  # own not below L: takes less
            first[1].saturated = False
            self._take_in(first[1], now)
            return True
        first = self._first_child(self._uns_own)
        if first is not None and first[0] < level:  # own below L: takes its whole capacity
            first[1].saturated = True
            self._take_in(first[1], now)
            return True
        first = self._first_child(self._uns_low)  # a level member below L: to be capped
        if first is None or not first[0] < level:
            first = self._first_child(self._uns_high)  # a capped one above L: to the level
            if first is None or not -first[0] > level:
                return False
        child = first[1]
        child._advance(now)
        child._move_one(now, level)
        self._take_in_dirty(now)
        return True

    @staticmethod
    def _first_child(
        heap: list[tuple[float, int, int, SharedLink]],
    ) -> tuple[float, SharedLink] | None:
        """The top entry's key and child (stale entries, of an older ``bver``, popped first)."""
        while heap:
            key, _, ver, child = heap[0]
            if child.bver == ver:
                return key, child
            heapq.heappop(heap)
        return None

    def _take_in_dirty(self, now: float) -> None:
        """:meth:`_take_in` every child on :attr:`_dirty` (the children that changed)."""
        dirty = self._dirty
        i = 0
        while i < len(dirty):  # (a saturated child's own rebalancing may list it again)
            child = dirty[i]
            if child.dirty:
                self._take_in(child, now)
            i += 1
        dirty.clear()

    def _take_in(self, child: SharedLink, now: float) -> None:
        """Count ``child`` again in the sums and heaps (it changed, or moved, or flipped).

        A saturated child is first brought into agreement with its own level (its own
        water-filling, :meth:`_rebalance`: it takes its capacity whatever its classes).
        """
        child.dirty = False
        own, low, high = child._bounds()
        if child.saturated and (low < own or high > own):
            child._advance(now)
            child._rebalance(now)
            child.dirty = False  # (its moves listed it again)
            own, low, high = child._bounds()
        child.bver = ver = child.bver + 1
        n = child.n_level
        slot = child.slot
        push = heapq.heappush
        if child.saturated:
            fixed, slope = child.capacity, 0
            push(self._sat_own, (-own, slot, ver, child))
        else:
            fixed, slope = child.capped_sum, n
            if n:
                push(self._uns_own, (own, slot, ver, child))
                push(self._uns_low, (low, slot, ver, child))
            if child.capped:
                push(self._uns_high, (-high, slot, ver, child))
        count = n + len(child.capped)
        self.t_slope += slope - child.seen_slope
        self.t_count += count - child.seen_count
        self._t_changes += 1
        if self._t_changes > len(self.children) + 16:  # recomputed exactly: no drift
            child.seen_fixed = fixed
            self.t_fixed = math.fsum([c.seen_fixed for c in self.children])
            self._t_changes = 0
        else:
            self.t_fixed += fixed - child.seen_fixed
            child.seen_fixed = fixed
        child.seen_slope, child.seen_count = slope, count
        if not child.touched:
            child.touched = True
            self._touched.append(child)

    def _finish_tree(self, now: float, level: float) -> None:
        """Settle the children the solve touched at this link's new level ``level``.

        Each gets its level (its own if saturated, else ``level``; a follower's is read off
        this link), is advanced to ``now``, starts or stops following (an unsaturated child
        with level members under a finite ``level`` follows: its offset fixed now), has its
        follower entry pushed and its next completion filed (a follower's: its capped
        members' only; its level members' are this link's). Untouched children are as they
        were: a saturated one keeps its own level, a follower its offset.
        """
        self.level = level
        inf, pop = math.inf, heapq.heappop
        finite = level != inf and level != -inf
        touched = self._touched
        for child in touched:
            child.touched = False
            n = child.n_level
            follow = finite and n > 0 and not child.saturated
            if child.follows:
                child._sync(now)
                if not follow:
                    child.follows = False
                    child.fver += 1
                    self.n_follow -= 1
            else:
                if child.since != now:  # child._advance(now) at its old level, inline
                    old = child.level
                    if n and old != inf and old != -inf:
                        child.clock = child.clock + old * (now - child.since)
                    child.since = now
                if follow:
                    child.follows = True
                    child.offset = self.fclock - child.clock
                    self.n_follow += 1
            if child.saturated:  # _own_level, inline
                own = (child.capacity - child.capped_sum) / n if n else inf
            else:
                own = level
            child.level = own
            t = inf
            if n:  # its first level member: a follower's entry, or its next_finish
                heap = child._by_key
                while heap:  # _top, inline
                    _, _, ver, first = heap[0]
                    if first.ver == ver and first.link is not None:
                        if follow:
                            child.fver = fver = child.fver + 1
                            child.wkey = wkey = first.key + child.offset
                            heapq.heappush(self._follow, (wkey, child.slot, fver, child))
                        elif own < inf:
                            t = child.since + (first.key - child.clock) / own
                        break
                    pop(heap)
            if child.capped:
                heap = child._by_end
                while heap:
                    _, _, ver, first = heap[0]
                    if first.ver == ver and first.link is not None:
                        end = first.t0 + first.rem0 / first.cap
                        if end < t:  # min(t, end)
                            t = end
                        break
                    pop(heap)
            if t != child.next_at:  # child._next(t), inline
                child.next_at = t
                if not child.listed and child.filing is not None:
                    child._refile()
        touched.clear()
        if not self.n_follow:
            self.fclock = 0.0
            self._follow.clear()
        self._compact()
        t = self.next_finish()
        follow_t = self._follow_next()
        self._next(follow_t if follow_t < t else t)

    def _follow_next(self) -> float:
        """When the followers' first level member finishes if nothing changes (``inf``: none)."""
        heap = self._follow
        while heap:
            wkey, _, ver, child = heap[0]
            if child.fver == ver and child.follows:
                return self.fsince + (wkey - self.fclock) / self.level
            heapq.heappop(heap)
        return math.inf

    def _due_followers(self, at: float) -> list[SharedLink]:
        """The followers whose first level member finishes by ``at``, in filing order.

        The follower heap's entries finishing by ``at``, found from its top down (a
        finishing time is monotone in the key), stale ones skipped; nothing is popped.
        """
        heap = self._follow
        out: list[SharedLink] = []
        fsince, fclock, level = self.fsince, self.fclock, self.level
        stack = [0] if heap else []
        size = len(heap)
        while stack:
            i = stack.pop()
            wkey, _, ver, child = heap[i]
            if fsince + (wkey - fclock) / level > at:
                continue
            if child.fver == ver and child.follows:
                out.append(child)
            j = 2 * i + 1
            if j < size:
                stack.append(j)
                if j + 1 < size:
                    stack.append(j + 1)
        if len(out) > 1:
            out.sort(key=_index)
        return out

    def _compact(self) -> None:
        """Build the children's heaps again from their current entries where mostly stale."""
        most = 4 * len(self.children) + 64
        if (
            max(len(self._sat_own), len(self._uns_own), len(self._uns_low), len(self._uns_high))
            > most
        ):
            sat: list[tuple[float, int, int, SharedLink]] = []
            own_: list[tuple[float, int, int, SharedLink]] = []
            low_: list[tuple[float, int, int, SharedLink]] = []
            high_: list[tuple[float, int, int, SharedLink]] = []
            for child in self.children:
                if child.dirty:  # taken in (pushed) at the next solve
                    continue
                own, low, high = child._bounds()
                entry = child.slot, child.bver, child
                if child.saturated:
                    sat.append((-own, *entry))
                else:
                    if child.n_level:
                        own_.append((own, *entry))
                        low_.append((low, *entry))
                    if child.capped:
                        high_.append((-high, *entry))
            for heap in (sat, own_, low_, high_):
                heapq.heapify(heap)
            self._sat_own, self._uns_own, self._uns_low, self._uns_high = sat, own_, low_, high_
        if len(self._follow) > most:
            follow = [(c.wkey, c.slot, c.fver, c) for c in self.children if c.follows]
            heapq.heapify(follow)
            self._follow = follow

    def _bounds(self) -> tuple[float, float, float]:
        """(own level, smallest level member's cap, largest capped member's cap).

        ``inf`` and ``-inf`` stand for no such member: the classes agree with a level ``L``
        exactly when ``not low < L and not high > L``. Kept until a member changes.
        """
        if self._bounds_at is None:
            low, high = self._top(self._by_low), self._top(self._by_high)
            self._bounds_at = (
                self._own_level(),
                math.inf if low is None else low.cap,
                -math.inf if high is None else high.cap,
            )
        return self._bounds_at

    def _move_one(self, now: float, level: float) -> bool:
        """Move one member whose class disagrees with ``level``; whether one was moved."""
        low = self._top(self._by_low)
        if low is not None and low.cap < level:  # below the level: capped by its own link
            left = low.key - self.clock
            self._drop_level(low)
            self._to_capped(low, left, now)
            return True
        high = self._top(self._by_high)
        if high is not None and high.cap > level:  # above the level: rejoins it
            left = high.rem0 - high.cap * (now - high.t0)
            self._drop(high)
            high.link = self
            self._to_level(high, left)
            return True
        return False

    def _rebalance(self, now: float) -> None:
        """Water-filling from the current classes: each member changes class at most twice.

        :meth:`_move_one` and :meth:`next_finish`, with their heap look-ups inline (the same
        arithmetic: this runs at every flow event of a link on its own).
        """
        level = self.level
        if self.n_level and level != math.inf and level != -math.inf:  # _advance, inline
            self.clock = self.clock + level * (now - self.since)
        self.since = now
        by_low, by_high, pop = self._by_low, self._by_high, heapq.heappop
        steps = 0  # at most 64 + 4 per member (moves keep the number of members)
        while True:
            steps += 1
            if steps > 64 and steps > 64 + 4 * (self.n_level + len(self.capped)):
                break
            n = self.n_level
            level = (self.capacity - self.capped_sum) / n if n else math.inf
            self.level = level
            moved = False
            while by_low:  # the level member with the smallest cap (_top, inline)
                _, _, ver, low = by_low[0]
                if low.ver == ver and low.link is not None:
                    if low.cap < level:  # below the level: capped by its own link
                        left = low.key - self.clock
                        self._drop_level(low)
                        self._to_capped(low, left, now)
                        moved = True
                    break
                pop(by_low)
            if moved:
                continue
            while by_high:  # the capped member with the largest cap
                _, _, ver, high = by_high[0]
                if high.ver == ver and high.link is not None:
                    if high.cap > level:  # above the level: rejoins it
                        left = high.rem0 - high.cap * (now - high.t0)
                        self._drop(high)
                        high.link = self
                        self._to_level(high, left)
                        moved = True
                    break
                pop(by_high)
            if not moved:
                break
        # next_finish, inline
        t = math.inf
        by_key = self._by_key
        while by_key:
            _, _, ver, first = by_key[0]
            if first.ver == ver and first.link is not None:
                if level < math.inf:
                    t = self.since + (first.key - self.clock) / level
                break
            pop(by_key)
        by_end = self._by_end
        while by_end:
            _, _, ver, first = by_end[0]
            if first.ver == ver and first.link is not None:
                end = first.t0 + first.rem0 / first.cap
                if end < t:
                    t = end
                break
            pop(by_end)
        if t != self.next_at:  # _next(t), inline: this runs at every flow event
            self.next_at = t
            if not self.listed and self.filing is not None:
                self._refile()

    def _drop_level(self, m: Member) -> None:
        self._bounds_at = None
        if self.parent is not None and not (self.dirty and self.take_stale):
            self._changed()
        m.ver += 1
        self.n_level -= 1


def wake_up(due: list[SharedLink], links: list[SharedLink], at: float, now: float) -> list[Member]:
    """Take out the members done at a completion scheduled for ``at``; settle what changed.

    ``due`` are the links whose completion it is (``next_at`` at most ``at``:
    :meth:`Calendar.due <simfl.engine.flows.calendar.Calendar.due>`, in the order the links
    were filed), ``links`` every link of the network. Only the due links are asked
    (:meth:`SharedLink.due`, then :meth:`SharedLink.finished`), and with a parent its
    followers whose first level member finishes by ``at`` (their level members finish on the
    parent's follower clock, so the parent's ``next_at`` is theirs too); if rounding left
    every member a hair short, the soonest one is taken anyway (:meth:`SharedLink.pop_first`,
    of the follower whose member it is where it is one). Only the links that lost members
    are rebalanced, each as :meth:`SharedLink.settle` does, except that each tree is solved
    at most once (after the nested links whose own water-filling is the whole solution).
    Every other link keeps its members, classes and next completion. Returns the members
    taken out, link by link (callers order them by admission, ``seq``).
    """
    finished: list[Member] = []
    touched: dict[SharedLink, None] = {}  # (a follower can be due twice: once by its parent)
    for link in due:
        if link.n_follow:  # a parent: its followers' level members finish on its calendar
            for child in link._due_followers(at):
                if child.due(now):
                    done = child.finished(now)
                    if done:
                        finished += done
                        touched[child] = None
        if (link.n_level or link.capped) and link.due(now):
            done = link.finished(now)
            if done:
                finished += done
                touched[link] = None
    if not finished:  # rounding: the soonest member is a hair short; finish it anyway
        busy = [link for link in links if link.n_level or link.capped or link.n_follow]
        first = min(busy, key=lambda link: link.next_at)
        if first.n_follow and first._follow_next() <= first.next_finish():
            first = first._follow[0][3]  # the follower whose member it is (_follow_next)
        finished.append(first.pop_first(now))
        touched[first] = None
    trees: dict[SharedLink, None] = {}
    for link in touched:  # each link at most once
        parent = link.parent
        if parent is None:
            if link.children:
                trees[link] = None
            else:
                link._rebalance(now)
        elif not link._settle_alone(now):
            trees[parent] = None
    for top in trees:
        top._rebalance_tree(now)
    return finished


def _index(link: SharedLink) -> int:
    return link.index
