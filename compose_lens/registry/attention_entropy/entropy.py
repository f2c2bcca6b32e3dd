"""Attention entropy per head at ``=``: how spread each head's attention from the answer position is.

A head that routes, as the study's layer-2 head does, puts its attention from ``=`` on a few
positions (the queried values): its entropy is low, near ``log 2`` for two values. A head that
averages over the context spreads it: near ``log n`` for ``n`` positions. The entropy
``H = -sum_j a_j log a_j`` (in nats) of the pattern from ``=`` is read on the nine pools' sequences
for every layer and head, as a mean with a 95 % bootstrap interval over the sequences, split by
sequence kind (``const``, ``var1``, ``var2``: no, one or two variable operands), since a router only has somewhere to look
when an operand is a variable.
"""

from __future__ import annotations

import math

import numpy as np
import pandas as pd
import torch

from compose_lens.analysis.locate import trace
from compose_lens.data.sampler import concat_batches, make_pools
from compose_lens.data.split import row_types
from compose_lens.data.task import SequenceKind
from compose_lens.core import stats
from compose_lens.training.subject import Subject


def entropy(pattern: torch.Tensor) -> torch.Tensor:
    """Entropy in nats of attention rows (..., n) that sum to 1 (0 log 0 read as 0).

    >>> entropy(torch.tensor([[0.5, 0.5, 0.0], [1.0, 0.0, 0.0]])).tolist()
    [0.6931471824645996, 0.0]
    """
    return 0.0 - (pattern * pattern.clamp_min(1e-30).log()).sum(-1)  # 0.0 - x: no -0.0


def attention_entropy(subject: Subject, pool_size: int = 200, seed: int = 0, n_boot: int = 1000) -> pd.DataFrame:
    """One row per (layer, head, sequence kind): the mean entropy of the head's attention from ``=``,
    its 95 % bootstrap interval over the sequences, and the two reference values ``log 2`` (two
    positions) and ``log n`` (uniform over the ``n`` positions)."""
    model, config, split = subject.model, subject.config, subject.split
    batch, _ = concat_batches(make_pools(split, pool_size, seed))
    patterns = trace(model, config, batch.tokens).patterns  # per layer (B, H, n, n)
    kinds = np.array([SequenceKind.at(i).prompt for i in row_types(batch.rows).tolist()])  # const, var1, var2
    rng = np.random.default_rng(seed)
    rows = []
    n = batch.tokens.shape[1]
    for layer, pattern in enumerate(patterns):
        last = entropy(pattern[:, :, -1, :]).numpy()  # (B, H)
        for head in range(last.shape[1]):
            for label, chosen in (("all", np.ones(len(last), bool)),
                                  *((kind, kinds == kind) for kind in ("const", "var1", "var2"))):
                values = last[chosen, head]
                if len(values) == 0:
                    continue
                mean, low, high = stats.bootstrap_interval(np.mean, values, seed=rng, resamples=n_boot,
                                                           vectorized=True)
                rows.append({"layer": layer, "head": head, "kind": label, "entropy": mean, "low": low, "high": high,
                             "n": int(len(values)), "log_2": math.log(2), "log_n": math.log(n)})
    return pd.DataFrame(rows)


def lowest(table: pd.DataFrame, kind: str = "var2") -> dict:
    """The head of lowest entropy on ``kind`` sequences (the router's candidate), as a dict row."""
    rows = table[table["kind"] == kind]
    return rows.loc[rows["entropy"].idxmin()].to_dict() if len(rows) else {}
