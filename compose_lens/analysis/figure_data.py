"""The numbers behind the study's model figures, as arrays and tables (no drawing here).

:mod:`compose_lens.views` draws; it never runs a model. Each function below runs
the analyses of this package on one model (or two checkpoints) and returns what
one figure shows, so the offline report, the ``experiments/fig_*.py`` scripts and
the ``compose-lens`` output writers draw the same numbers the same way:

* :func:`cosine_groups`: centred cosines of the MLP2 input, constant against
  variable operand of the same (x, y), against mismatched pairs (:mod:`.same_mlp`).
"""

from __future__ import annotations

import numpy as np
import torch

from compose_lens.analysis import locate
from compose_lens.analysis.same_mlp import matched_prompts, mlp_in
from compose_lens.model.forward import ANSWER, Forward, Site
from compose_lens.training.subject import Subject


# -- one MLP for constants and variables ---------------------------------------------------------


def cosine_groups(subject: Subject, n: int = 1000, seed: int = 0,
                  block: int | None = None) -> dict[str, np.ndarray]:
    """Centred cosines of the MLP2 input at ``=`` (the input of ``block``'s MLP, default
    :func:`~compose_lens.analysis.locate.mlp_block`): constant vs variable prompt of the same (x, y)
    (matched) against pairs with different answers (mismatched), for a left and a right variable.

    The prompts come from :func:`compose_lens.analysis.same_mlp.matched_prompts`; the mean
    MLP2 input over all prompts is subtracted first (raw cosines share a large offset).
    """
    model, config, split = subject.model, subject.config, subject.split
    site = Site(mlp_in(locate.mlp_block(subject, seed) if block is None else block), ANSWER)
    forward = Forward(model, config.model)
    groups = {}
    g = torch.Generator().manual_seed(seed)
    for side in ("left", "right"):
        const, var, labels = matched_prompts(split, n, side, seed)
        h = [forward.read(t, [site], len(t))[site] for t in (const, var)]
        centre = torch.cat(h).mean(0)
        a, b = h[0] - centre, h[1] - centre
        partner = torch.randperm(len(labels), generator=g)
        other = labels[partner] != labels
        groups[f"matched, {side} variable"] = torch.cosine_similarity(a, b, dim=-1).numpy()
        groups[f"mismatched, {side} variable"] = torch.cosine_similarity(a[other], b[partner][other], dim=-1).numpy()
    return groups
