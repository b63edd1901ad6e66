"""Policy: the named parts of a scheduler (order, placement, backfill rule, steps), checked when built.

A policy is written `ORDER[+PLACEMENT][+backfill|+nobackfill][+preempt]`, e.g. `las+binpack+backfill+preempt`
or `fifo+nobackfill`; missing parts take the defaults. An unknown name fails with the list of known ones, so a bad
profile fails at startup, not in the middle of a cycle.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from nanum.core.ordering import ORDERS, QueueOrder
from nanum.core.placement import PLACEMENTS, PlacementPolicy

#: What nanum runs unless told otherwise, chosen by the trace study in docs/simulation.md: discretised LAS classes
#: with preemption of lower classes, and inside a class the Gittins index learned from finished jobs. It needs no
#: run-time estimates from users, gave the lowest queueing of every policy that knows no future on every trace
#: studied, and evens out the labs' slowdowns. `Policy()` itself stays plain FIFO.
DEFAULT_POLICY = "gittins+binpack+backfill+preempt"
DEFAULT_ORDER = "fifo"
DEFAULT_PLACEMENT = "binpack"
#: the words of a policy string for each backfill rule (`nanum.core.backfill_rules.BACKFILLS`).
BACKFILL_WORDS = {"backfill": "easy", "easy": "easy", "nobackfill": "none", "none": "none"}
BACKFILL_RULES = ("easy", "none")
PREEMPT_WORDS = {"preempt": True, "nopreempt": False}


class PolicyError(ValueError):
    """A policy string or setting names something that does not exist."""


@dataclass(frozen=True, slots=True, kw_only=True)
class Policy:
    """How a cycle decides.

    `backfill`: what later jobs of a partition may do while its first blocked job waits (`easy`: start where they
    do not delay its reservation; `none`: wait behind it; `nanum.core.backfill_rules`). `lend`: idle GPUs of
    nodes a lab owns may run other labs' jobs (pooled); False keeps each lab on its own and the shared nodes
    (partitioned, like Slurm partitions). `reclaim`: a lab under its guarantee preempts borrowers.
    `estimate_depth`: how many blocked jobs per partition get a start estimate (the first is EASY's reservation).
    `preempt`: a blocked job preempts running jobs the order ranks in a lower priority class (Tiresias; see
    `nanum.core.preempt`); the order must define classes (`las` and `gittins` do). With backfill too, a job that
    would delay the first blocked job's reservation starts on its GPUs and is preempted when that job can start,
    where plain EASY backfill would keep them idle.
    """

    order: str = DEFAULT_ORDER
    placement: str = DEFAULT_PLACEMENT
    backfill: str = "easy"
    lend: bool = True
    reclaim: bool = True
    estimate_depth: int = 1
    preempt: bool = False

    def __post_init__(self) -> None:
        if self.order not in ORDERS:
            raise PolicyError(f"unknown queue order {self.order!r}; choose one of {', '.join(ORDERS)}")
        if self.placement not in PLACEMENTS:
            raise PolicyError(
                f"unknown placement {self.placement!r}; choose one of {', '.join(PLACEMENTS)}"
            )
        if self.backfill not in BACKFILL_RULES:
            raise PolicyError(f"unknown backfill rule {self.backfill!r}; choose one of {', '.join(BACKFILL_RULES)}")
        if self.estimate_depth < 1:
            raise PolicyError("estimate_depth must be at least 1")
        if self.preempt and not hasattr(ORDERS[self.order], "level"):
            with_classes = ", ".join(name for name, o in ORDERS.items() if hasattr(o, "level"))
            raise PolicyError(f"order {self.order!r} has no priority classes to preempt by; +preempt works with "
                              f"{with_classes}")

    @classmethod
    def parse(cls, text: str, **overrides: object) -> Policy:
        """`las+binpack+backfill` → Policy(order='las', placement='binpack', backfill='easy')."""
        parts = [p.strip().lower() for p in text.split("+") if p.strip()]
        if not parts:
            raise PolicyError("empty policy; write ORDER[+PLACEMENT][+backfill|+nobackfill], e.g. fifo+binpack")
        fields: dict[str, object] = {"order": parts[0]}
        for part in parts[1:]:
            if part in BACKFILL_WORDS:
                fields["backfill"] = BACKFILL_WORDS[part]
            elif part in PREEMPT_WORDS:
                fields["preempt"] = PREEMPT_WORDS[part]
            elif part in PLACEMENTS:
                fields["placement"] = part
            else:
                raise PolicyError(
                    f"unknown policy part {part!r} in {text!r}; placements: {', '.join(PLACEMENTS)}; "
                    "backfill: backfill, nobackfill; preemption: preempt, nopreempt"
                )
        fields.update(overrides)
        return cls(**fields)  # type: ignore[arg-type]

    @classmethod
    def default(cls, **overrides: object) -> Policy:
        """nanum's default policy, `DEFAULT_POLICY`."""
        return cls.parse(DEFAULT_POLICY, **overrides)

    @property
    def label(self) -> str:
        preempt = "+preempt" if self.preempt else ""
        return f"{self.order}+{self.placement}+{'backfill' if self.backfill == 'easy' else 'nobackfill'}{preempt}"

    @property
    def steps(self) -> tuple[str, ...]:
        """The steps a blocked job takes, in order (`nanum.core.steps.STEPS`): `reclaim` when labs reclaim their
        guarantees, `take-back` and `preempt` with `+preempt`."""
        return ("reclaim",) * self.reclaim + ("take-back", "preempt") * self.preempt

    def with_(self, **changes: object) -> Policy:
        return replace(self, **changes)  # type: ignore[arg-type]

    def make_order(self) -> QueueOrder:
        return ORDERS[self.order]()

    def make_placement(self) -> PlacementPolicy:
        return PLACEMENTS[self.placement]()
