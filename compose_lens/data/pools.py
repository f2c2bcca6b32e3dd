"""The accuracy pools as data: which kinds of sequence, which addition pairs, which variables.

A pool (SPEC section 3) is a set of sequences that isolates one thing the model may or
may not have learned: constants on held-out pairs, a variable in a slot it never held in
training, and so on. Each is one :class:`Pool`, which
:func:`compose_lens.data.sampler.make_pool` draws from its fields alone (no name is parsed):
its sequence kinds, the addition pairs of its rows (training or held out), how many operand
slots hold a variable *forbidden* there in training, and where its rows come from:

* ``table``: distinct rows of the study's row table restricted to the pairs (the study
  shuffles its rows and keeps the first 2,000);
* ``training``: the kept training rows of those kinds (for ``2var_train`` the 2-var rows
  that r kept; every candidate row where r kept none);
* ``builder``: drawn with replacement by the study's pool builder (1-var: a side
  uniformly, then one of its variables; 2-var: a pair, then a variable pair, with n
  uniform on 2..6 as in the 2-var union).

The study's nine are :data:`STUDY_POOLS`. A task variant adds its own
(:data:`compose_lens.data.variants.VARIANT_POOLS`), whose fields after ``rows`` say how they
render (keyword arguments of :func:`~compose_lens.data.variants.render_variant`), which
answer they are scored against, and whose random stream they share.

>>> pool = find_pool(STUDY_POOLS, "1var_var_restricted")
>>> [str(kind) for kind in pool.kinds], pool.pairs, pool.forbidden, pool.rows
(['1var_left', '1var_right'], 'train', 1, 'builder')
>>> [pool.name for pool in STUDY_POOLS if pool.pairs == "heldout"]
['0var_add_restricted', '1var_add_restricted', '2var_add_restricted']
"""

from __future__ import annotations

from dataclasses import dataclass, field

from compose_lens.data.task import SequenceKind, SequenceError

ONE_VAR = (SequenceKind.ONE_VAR_LEFT, SequenceKind.ONE_VAR_RIGHT)
PAIRS = ("train", "heldout")
ROWS = ("table", "training", "builder")
LABELS = ("latest", "first")
EXHAUSTIVE_NAMES = ("zero_var_heldout", "two_var_union")


@dataclass(frozen=True)
class Pool:
    """One pool: its sequences' kinds, pairs (``train`` or ``heldout``), forbidden slots and row source
    (``table``, ``training`` or ``builder``; module docstring). ``forbidden``: how many operand slots
    hold a variable forbidden there in training (0; 1 for 1-var rows; 1 or 2 for 2-var rows,
    :meth:`~compose_lens.core.config.TaskConfig.restricted_two_var_pairs`). The fields after ``rows``
    belong to a variant's pools."""

    name: str
    kinds: tuple[SequenceKind, ...]
    pairs: str
    forbidden: int = 0
    rows: str = "table"
    description: str = field(default="", repr=False, compare=False)
    reassign: str = field(default="rate", repr=False)
    chain: str = field(default="rate", repr=False)
    noise_rate: float | None = field(default=None, repr=False)
    reassignable_only: bool = field(default=False, repr=False)
    labels: str = field(default="latest", repr=False)
    stream: str = field(default="", repr=False)

    def __post_init__(self) -> None:
        kinds = tuple(SequenceKind.parse(kind) for kind in self.kinds)
        object.__setattr__(self, "kinds", kinds)
        where = f"pool {self.name!r}"
        if not kinds or len(set(kinds)) != len(kinds):
            raise SequenceError(f"{where}: kinds {[str(k) for k in kinds]}: name each kind once, at least one")
        if self.pairs not in PAIRS or self.rows not in ROWS or self.labels not in LABELS:
            raise SequenceError(f"{where}: pairs {self.pairs!r}, rows {self.rows!r}, labels {self.labels!r}: "
                                f"use pairs {' / '.join(PAIRS)}, rows {' / '.join(ROWS)}, labels {' / '.join(LABELS)}")
        if self.rows == "builder":
            if kinds not in (ONE_VAR, (SequenceKind.TWO_VAR,)):
                raise SequenceError(f"{where}: the pool builder draws 1-var (both sides) or 2-var rows only")
            if not 0 <= self.forbidden <= (1 if kinds == ONE_VAR else 2):
                raise SequenceError(f"{where}: forbidden={self.forbidden}: at most 1 for 1-var rows, 2 for 2-var")
        elif self.forbidden:
            raise SequenceError(f"{where}: rows of the {self.rows} hold only allowed variables; "
                                f"draw forbidden slots with rows='builder'")

    @property
    def two_var_n(self) -> str:
        """How many assignments its 2-var sequences hold (``render``'s ``two_var_n``): ``uniform``
        on 2..6 for the builder's 2-var rows (as the 2-var union), else as training renders."""
        return "uniform" if self.rows == "builder" and self.kinds == (SequenceKind.TWO_VAR,) else "training"

    @property
    def stream_of(self) -> str:
        """The pool whose random stream it draws from: its own, or the one it re-scores."""
        return self.stream or self.name


_TRAIN, _HELDOUT = "train", "heldout"
_ZERO, _TWO = (SequenceKind.ZERO_VAR,), (SequenceKind.TWO_VAR,)

STUDY_POOLS = (
    Pool("0var_train", _ZERO, _TRAIN, description="constants, training pairs"),
    Pool("0var_add_restricted", _ZERO, _HELDOUT, description="constants, held-out pairs"),
    Pool("1var_train", ONE_VAR, _TRAIN, description="one variable in an allowed slot, training pairs"),
    Pool("1var_add_restricted", ONE_VAR, _HELDOUT, rows="builder",
         description="one variable in an allowed slot, held-out pairs"),
    Pool("1var_var_restricted", ONE_VAR, _TRAIN, forbidden=1, rows="builder",
         description="one variable in a slot it never holds in training, training pairs"),
    Pool("2var_train", _TWO, _TRAIN, rows="training", description="the kept 2-var training rows"),
    Pool("2var_add_restricted", _TWO, _HELDOUT, description="two variables in allowed slots, held-out pairs"),
    Pool("2var_var_restricted_1", _TWO, _TRAIN, forbidden=1, rows="builder",
         description="two variables, one in a forbidden slot, training pairs"),
    Pool("2var_var_restricted_2", _TWO, _TRAIN, forbidden=2, rows="builder",
         description="two variables, both in forbidden slots, training pairs"),
)
POOL_NAMES = tuple(pool.name for pool in STUDY_POOLS)


def find_pool(pools: tuple[Pool, ...], name: str) -> Pool:
    """The pool called ``name`` among ``pools``; an unknown name is refused in one line."""
    for pool in pools:
        if pool.name == name:
            return pool
    raise SequenceError(f"unknown pool {name!r}; the pools are {', '.join(pool.name for pool in pools)}")
