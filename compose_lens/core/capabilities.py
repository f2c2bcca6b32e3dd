"""Which forward can compute a model of a given configuration, and why not: read from the config alone.

compose-lens has five ways to run a model. Four are its own, written in terms of the weights
(every head through :mod:`compose_lens.model.heads`), each exact only for some architectures:

==================  ===========================================================  =========================
forward             what it is                                                   needs
==================  ===========================================================  =========================
``tables``          :mod:`compose_lens.model.fastpath`: the answer at ``=`` from  the paper architecture:
                    score tables over the vocabulary and the positions, no        2 layers, 1 head each, an
                    (batch, positions, d_model) tensor (training, evaluation,     MLP in the last only, no
                    the analyses of the paper model)                              norm, untrained biases
``lastpos``         :mod:`compose_lens.model.lastpos`: any depth and head count,  no normalisation
                    the last layer at ``=`` only
``patching``        the batched patching engine of                                2 layers, an MLP in the
                    :mod:`compose_lens.model.patch_engine` (every site of a kind  last only, no norm
                    at once, from the weights)
``graph``           the edge graph of :mod:`compose_lens.registry.circuit.discovery`        anything (each receiver
                    (every residual term a sender, per-edge masks)                normalises its own input)
``transformerlens`` the TransformerLens bridge and its hooks                      anything
==================  ===========================================================  =========================

A normalisation layer divides by the norm of the whole residual stream, so the forwards that add
precomputed terms or tables cannot take it; the edge graph can, since it rebuilds each receiver's
input from its terms and normalises that as the model does. The table forward and the patching
engine further assume the paper's layout (the answer is MLP2 + unembedding after layer-2 attention).
The idealised variants constrain the weights' values, not the forward: every forward that covers the
architecture covers them.

>>> from compose_lens.core.config import ModelConfig
>>> why_not(ModelConfig(), "tables") is None
True
>>> print(why_not(ModelConfig(n_layers=3, n_heads=2, mlp_blocks=(0, 1, 2)), "tables"))
the table forward needs the paper architecture: n_layers=3 (needs 2), n_heads=2 (needs 1), mlp_blocks=[0, 1, 2] (needs [1])
>>> answer_forward(ModelConfig(n_heads=4, d_head=32))
'lastpos'
"""

from __future__ import annotations

from compose_lens.core.config import ModelConfig
from compose_lens.core.errors import ComposeLensError

FORWARDS = ("tables", "lastpos", "patching", "graph", "transformerlens")
_NAMES = {"tables": "the table forward", "lastpos": "the last-position forward",
          "patching": "the batched patching engine", "graph": "the edge graph"}


def _layout_problems(cfg: ModelConfig) -> list[str]:
    found = [] if cfg.n_layers == 2 else [f"n_layers={cfg.n_layers} (needs 2)"]
    return found + ([] if tuple(cfg.mlp_blocks) == (1,) else [f"mlp_blocks={list(cfg.mlp_blocks)} (needs [1])"])


def _norm_problems(cfg: ModelConfig) -> list[str]:
    return [] if cfg.normalization_type is None else [f"normalization_type={cfg.normalization_type!r} (needs null)"]


def _problems(cfg: ModelConfig, forward: str) -> tuple[str, list[str]]:
    """(what the forward needs, the conditions ``cfg`` fails), in the order of the config."""
    if forward == "tables":
        layout = _layout_problems(cfg)
        heads = [] if cfg.n_heads == 1 else [f"n_heads={cfg.n_heads} (needs 1)"]
        biases = ["trained_biases=true (needs false)"] if cfg.trained_biases else []
        return "the paper architecture", layout[:1] + heads + layout[1:] + _norm_problems(cfg) + biases
    if forward == "patching":
        return "the paper's layout without normalisation", _layout_problems(cfg) + _norm_problems(cfg)
    if forward == "lastpos":
        return "a model without normalisation (a plain residual sum)", _norm_problems(cfg)
    if forward in ("graph", "transformerlens"):
        return "nothing", []
    raise ValueError(f"forward {forward!r}: use one of {', '.join(FORWARDS)}")


def why_not(cfg: ModelConfig, forward: str) -> str | None:
    """Why ``forward`` (one of :data:`FORWARDS`) is not exact for ``cfg`` (one line), or None."""
    needs, problems = _problems(cfg, forward)
    return f"{_NAMES[forward]} needs {needs}: {', '.join(problems)}" if problems else None


def supports(cfg: ModelConfig, forward: str) -> bool:
    """Whether ``forward`` is exact for ``cfg`` (:func:`why_not` is None)."""
    return why_not(cfg, forward) is None


def has_paper_layout(cfg: ModelConfig) -> bool:
    """Two layers and an MLP in the last one only: the readout at ``=`` is MLP2 + unembedding
    (any number of heads, normalisation and trained biases allowed)."""
    return not _layout_problems(cfg)


def is_paper_architecture(cfg: ModelConfig) -> bool:
    """The study's architecture, for which the table forward is exact (``supports(cfg, "tables")``)."""
    return supports(cfg, "tables")


def table(cfg: ModelConfig) -> dict[str, str | None]:
    """Every forward and why it declines ``cfg`` (None: it computes it exactly)."""
    return {forward: why_not(cfg, forward) for forward in FORWARDS}


def answer_forward(cfg: ModelConfig, mode: str = "auto") -> str:
    """The forward the trainer and the evaluations compute ``cfg``'s answer logits with. ``mode`` is
    ``fast_path``: ``auto`` the fastest exact one, ``off`` TransformerLens, ``on`` the tables or a refusal.
    """
    if mode == "off":
        return "transformerlens"
    reason = why_not(cfg, "tables")
    if reason is None:
        return "tables"
    if mode == "on":
        raise ComposeLensError(f"fast_path=on, but {reason}; use fast_path=auto")
    return "lastpos" if supports(cfg, "lastpos") else "transformerlens"
