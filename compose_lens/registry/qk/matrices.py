"""The ``qk`` numbers, read from the weights only: the binder's positional scores over the context and the
router's variable identity, each an attention score (:func:`compose_lens.analysis.probes.positional_qk_scores`,
:func:`~compose_lens.analysis.probes.variable_identity_matrix`), at the heads the locator names."""

from __future__ import annotations

import numpy as np

from compose_lens.analysis.probes import PAPER_HEADS, Heads, positional_qk_scores, variable_identity_matrix
from compose_lens.core.config import RunConfig
from compose_lens.model import tl


def qk_matrices(model: tl.Model, config: RunConfig,
                heads: Heads = PAPER_HEADS) -> tuple[np.ndarray | None, np.ndarray | None]:
    """(the binder's positional scores over the context, the variable identity of the binder's OV and the
    router's QK), both attention scores (scaled by sqrt(d_head)); None where no head plays a role (the
    identity also needs the router above the binder)."""
    positional = None if heads.binder is None else positional_qk_scores(model, config, heads=heads).numpy()
    identity = (None if heads.binder is None or heads.router is None or heads.router[0] <= heads.binder[0]
                else variable_identity_matrix(model, config, heads=heads).numpy())
    return positional, identity
