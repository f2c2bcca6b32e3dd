"""The answer lens's numbers: how far the answer at ``=`` is made after each layer, pool by pool.

The residual stream at ``=`` is read after the embeddings and after each layer (``blocks.L.hook_resid_post``,
through the one :class:`~compose_lens.model.forward.Forward`) and put through the model's final normalisation
and the unembedding (:meth:`compose_lens.model.forward.Forward.lens`, as the logit lens reads it). After the
last layer the stream is the model's own, so the last stage's top-1 rate is the model's accuracy on that pool.
"""

from __future__ import annotations

import pandas as pd

from compose_lens.core.stats import wilson_interval
from compose_lens.data.sampler import concat_batches, make_pools
from compose_lens.model.forward import Site


def stages(n_layers: int) -> dict[str, Site]:
    """Each stage's name and the site of the residual stream at ``=`` it reads, in forward order."""
    return {"embeddings": Site("blocks.0.hook_resid_pre", "="),
            **{f"after layer {layer + 1}": Site(f"blocks.{layer}.hook_resid_post", "=") for layer in range(n_layers)}}


def answer_lens(subject, pool_size: int = 200, seed: int = 0) -> pd.DataFrame:
    """One row per (pool, stage): ``logit`` (the answer's, mean), ``margin`` (the answer's logit minus the
    largest other, mean), ``top1`` (the fraction whose largest logit is the answer) with ``low`` and
    ``high`` (Wilson 95 %), and ``n``, over ``pool_size`` sequences of each pool."""
    sites = stages(subject.config.model.n_layers)
    pools = make_pools(subject.split, pool_size, seed)
    joined, rows_of = concat_batches(pools)
    read = subject.forward.read(joined.tokens, sites.values())  # every pool in one read
    rows = []
    for pool, batch in pools.items():
        part = rows_of[pool]
        for order, (stage, site) in enumerate(sites.items()):
            logits = subject.forward.lens(read[site][part].detach())
            answer = logits.gather(1, batch.labels[:, None])[:, 0]
            others = logits.scatter(1, batch.labels[:, None], float("-inf")).amax(1)
            hits = int((logits.argmax(1) == batch.labels).sum())
            low, high = wilson_interval(hits, len(batch))
            rows.append({"pool": pool, "stage": stage, "order": order, "logit": answer.mean().item(),
                         "margin": (answer - others).mean().item(), "top1": hits / len(batch),
                         "low": low, "high": high, "n": len(batch)})
    return pd.DataFrame(rows)


def first_stage_on_top(table: pd.DataFrame, at_least: float = 0.5) -> dict[str, str | None]:
    """Per pool, the first stage whose top-1 rate is at least ``at_least`` (None: no stage reaches it)."""
    ordered = table.sort_values("order")
    return {pool: next((r.stage for r in rows.itertuples() if r.top1 >= at_least), None)
            for pool, rows in ordered.groupby("pool", sort=False)}
