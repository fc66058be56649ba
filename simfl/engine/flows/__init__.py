"""Shared links: transfers that share a link share its capacity, max-min fairly.

Every transfer is a *flow* of ``size`` bytes over the links of its path, in one direction
(down: server to device; up: device to server); each direction of a link is a resource of some
capacity (bytes/s). Whenever a flow starts, finishes, pauses or is cancelled, the rates of the
active flows are the **max-min fair** allocation, the one *progressive filling* finds: raise
every rate together; a resource that fills freezes the flows through it
(:func:`~simfl.engine.flows.maxmin.max_min_rates`). On a single link this is processor
sharing, each of the ``n`` flows getting ``C / n``. A flow completes when its remaining bytes
reach zero at its current rate.

Two algorithms play the flows of a run (:class:`~simfl.engine.flows.links.Links` is what both
offer the engine):

* the **reference** (:class:`~simfl.engine.flows.reference.ReferenceFlowNetwork`) advances
  every flow and recomputes every rate by progressive filling at every flow event: ``O(n)``
  per event and more, plainly the definition. ``simfl.run(..., reference_links=True)`` plays
  it; the tests hold the fast one to it (to a relative ``1e-9``);
* the **fast** one (:class:`~simfl.engine.flows.network.FlowNetwork`, the default) makes each
  finite resource that several devices' paths cross a
  :class:`~simfl.engine.flows.sharedlink.SharedLink`, processor sharing with a cap per flow
  (the rest of its path, its device's own link), kept as a water-filling level, a virtual
  clock and heaps: ``O(log n)`` per flow event. Two such links nest (an edge server's link
  under the cloud's) and are solved together; a
  :class:`~simfl.engine.flows.calendar.Calendar` keeps the links' next completions. A flat
  synchronous round on it can also be played in one loop without SimPy processes
  (:mod:`simfl.engine.flows.flowround`), with the same arithmetic in the same order.

**The hand-over.** The fast network's structure holds a flow that crosses at most two
contended links, one nested under the other, and at most one flow at a time on each device's own
link. Where a topology breaks the first from the start (a graph with a path through three contended
links), the network plays the reference from its first flow. Where a flow breaks either during the
run (another nesting of the same links; a device with two flows at once), the network hands every
flow in progress over to the reference at that instant, with the bytes each has left, and plays the
reference for the rest of the run. Either way the network's ``handover`` says why and
``handover_at`` when (both ``None`` without a hand-over; every
:class:`~simfl.engine.flows.links.Links` has them, the reference's always ``None``), for the run's
record of fallbacks. The rates are the same max-min fair ones before and after; only the cost per
event changes, and the arithmetic (so results may differ by rounding from a run the fast network
plays throughout).

**Compiled or not.** The modules listed in ``_native.MODULES`` (all of this package's but
:mod:`~simfl.engine.flows.maxmin`, which is NumPy) are plain, fully typed Python that
``setup.py`` compiles with mypyc where it can, about twice as fast, the same results bit for
bit. Importing this package decides, once, which build runs (``simfl.engine.flows._native``):
the compiled one where it was built from the current sources, else the Python sources
(also under ``SIMFL_PURE_PYTHON=1``); ``_native.ACTIVE`` says which, ``_native.WHY_PURE``
why not the compiled.
"""

# first: it chooses the compiled modules or their Python sources before they are imported
from simfl.engine.flows import _native as _native
from simfl.engine.flows.calendar import Calendar
from simfl.engine.flows.flowround import applies, play_flow_round
from simfl.engine.flows.links import Flow, Links
from simfl.engine.flows.maxmin import max_min_rates
from simfl.engine.flows.network import FlowNetwork
from simfl.engine.flows.reference import ReferenceFlowNetwork
from simfl.engine.flows.sharedlink import Member, SharedLink

__all__ = [
    "Calendar",
    "Flow",
    "FlowNetwork",
    "Links",
    "Member",
    "ReferenceFlowNetwork",
    "SharedLink",
    "applies",
    "max_min_rates",
    "play_flow_round",
]
