"""Attention patterns: what both layers look at on sequences you type, and where the circuit says.

:func:`sequence_views` parses each readable sequence (:func:`compose_lens.data.task.parse_sequence`), runs
the model once (:func:`compose_lens.analysis.activations.attention_patterns`) and returns, per sequence, the
patterns, the model's answer, the label and the cells the study's circuit predicts (:func:`marked_cells`,
SPEC section 6, items 1-3); :func:`pattern_table` lays every view's patterns out as one table.
"""

from __future__ import annotations

from typing import Sequence

import pandas as pd
import torch

from compose_lens.analysis.activations import attention_patterns
from compose_lens.core.config import RunConfig, TaskConfig
from compose_lens.data.task import decode, parse_sequence, to_text, token_name
from compose_lens.model import tl


def marked_cells(task: TaskConfig, tokens: Sequence[int]) -> dict[int, list[tuple[int, int, str]]]:
    """The cells the study's circuit predicts, per layer: ``(query, key, kind)``. Layer 1 (index 0): ``=``
    to each operand (``operand``) and each context value to its variable just before it (``previous``).
    Layer 2: ``=`` to each value (``value``): a constant operand itself, else the number assigned to it."""
    tokens = [int(t) for t in tokens]
    n, C = task.seq_len, task.context_len
    last = n - 1
    layer1 = [(last, n - 3, "operand"), (last, n - 2, "operand")]
    layer1 += [(i, i - 1, "previous") for i in range(1, C)
               if 0 <= tokens[i] < task.modulus and tokens[i - 1] >= task.first_var_token]
    layer2 = []
    for position in (n - 3, n - 2):
        operand = tokens[position]
        if operand >= task.first_var_token:
            layer2.append((last, tokens[:C].index(operand) + 1, "value"))
        else:
            layer2.append((last, position, "value"))
    return {0: layer1, 1: layer2}


def head_names(model: tl.Model) -> list[str]:
    n_layers, n_heads = tl.size(model, "n_layers"), tl.size(model, "n_heads")
    return [f"layer {layer + 1} (blocks.{layer}) head {head}" if n_heads > 1 else f"layer {layer + 1} (blocks.{layer})"
            for layer in range(n_layers) for head in range(n_heads)]


def sequence_views(model: tl.Model, config: RunConfig, texts: Sequence[str]) -> list[dict]:
    """Parse, run and describe each sequence: tokens, words, patterns, answer, label, marks."""
    task = config.task
    token_rows = [parse_sequence(task, text) for text in texts]
    tokens = torch.tensor(token_rows, dtype=torch.long)
    patterns, logits = attention_patterns(model, config.model, tokens)
    names = head_names(model)
    views = []
    for i, row in enumerate(token_rows):
        d = decode(task, row)
        answer = int(logits[i].argmax())
        views.append({"text": to_text(task, row), "tokens": row, "words": [token_name(task, t) for t in row],
                      "patterns": patterns[i], "head_names": names, "answer": answer, "label": d.label,
                      "correct": answer == d.label, "type": d.type, "marks": marked_cells(task, row)})
    return views


def pattern_table(views: Sequence[dict]) -> pd.DataFrame:
    """Every view's patterns, one row per (sequence, layer, head, query, key) with the key at or before
    the query (a causal pattern is 0 above its diagonal): ``sequence`` (the view's index), ``text``,
    ``layer`` (1, 2), ``block`` (0, 1), ``head``, the query and key positions and tokens, the
    ``attention`` weight, and ``mark``: the kind of cell the circuit predicts there
    (:func:`marked_cells`: ``operand``, ``previous``, ``value``) or empty."""
    rows = []
    for index, view in enumerate(views):
        patterns, words = torch.as_tensor(view["patterns"]), view["words"]
        marks = {(int(layer), q, k): kind for layer, cells in view["marks"].items() for q, k, kind in cells}
        for layer in range(patterns.shape[0]):
            for head in range(patterns.shape[1]):
                weights = patterns[layer, head].tolist()
                rows += [(index, view["text"], layer + 1, layer, head, q, words[q], k, words[k], weights[q][k],
                          marks.get((layer, q, k), "")) for q in range(len(words)) for k in range(q + 1)]
    return pd.DataFrame(rows, columns=["sequence", "text", "layer", "block", "head", "query", "query_token", "key",
                                       "key_token", "attention", "mark"])
