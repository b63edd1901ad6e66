"""Keeping Python's cyclic garbage collector off the hot path of a long-running nanum process: the server and its
workers, an agent, and `nanum agent --simulate-nodes`.

The collector stops every thread of the process while it walks the objects it tracks, and a full collection walks
all of them. At 1,000 nodes (`benchmarks/scale.py`) a server process tracked about 480,000 objects, about 190,000
of them there from its start (modules, the app, its routes); with Python's thresholds it made 33 full collections
of about 300 ms each in a minute, and younger ones besides: 10.5 s of collecting in 60 s of serving, during which
no request and no tick ran. The process simulating those 1,000 nodes spent 4.7 s of a minute collecting, in pauses
of up to half a second in which none of its nodes heartbeated.

`settle` moves the objects made so far, which live as long as the process, out of the collector's sight
(`gc.freeze`): no collection walks them again, and processes forked afterwards (`nanum server --workers`) do not
write to the pages they share with their parent. `THRESHOLDS` lets many more objects be made between collections:
reference counting frees nearly all of them on its own, and the collector is only needed for the few that form
cycles. Measured at 1,000 nodes: the server collected for 1.5-2.1 s of a minute instead of 10.5 s, its longest
pause 143 ms instead of 318 ms.
"""

from __future__ import annotations

import gc

__all__ = ["THRESHOLDS", "settle"]

#: Collect the youngest objects after 10,000 new ones instead of Python's 700; the older generations as Python does.
THRESHOLDS = (10_000, 10, 10)


def settle() -> None:
    """Set `THRESHOLDS`, collect once, and freeze what is left. Call once the process has built what it keeps for
    its lifetime, before it starts serving (and before it forks, if it does)."""
    gc.set_threshold(*THRESHOLDS)
    gc.collect()
    gc.freeze()
