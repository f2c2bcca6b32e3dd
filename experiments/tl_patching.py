"""The reference the batched patching engines are held to: ``transformer_lens.patching``, one forward per site.

One copy for the two that compare against it: the patching test (they must agree to float rounding) and
``experiments/bench_patching.py`` (they must agree, then it times both).
"""

from __future__ import annotations

import torch

from compose_lens.analysis import metrics
from compose_lens.model import tl
from compose_lens.registry.patching import tables


def transformer_lens_logit_diffs(model, cfg, pairs):
    """The logit difference at the last position with each site of :data:`compose_lens.registry.patching.tables.COMPONENTS`
    patched in turn, by ``transformer_lens.patching``. Returns (sites, (S, N))."""
    _, cache = tl.run_with_cache(model, pairs.clean)
    sites, values = [], []
    for component in tables.COMPONENTS:
        table = tl.tl_patch_sweep(model, component, pairs.corrupted, cache,
                                  lambda logits: metrics.logit_diff(logits[:, -1].float(), pairs.answers))
        sites += tables.all_sites(cfg, [component])
        values.append(table.reshape(-1, len(pairs)).cpu())
    return sites, torch.cat(values)
