"""Where the own model's layer-1 head looks from ``=`` (docs/own-model.md): the mean attention of the located
gatherer over the positions, in the study's coordinates (the operands at 13 and 14), and how often each
pair of positions holds its two largest weights.

    python experiments/own_model_gatherer.py runs/own-model \\
        --json experiments/results/own_model/gatherer.json > experiments/results/own_model/gatherer.log

``runs/own-model`` is what ``experiments/own_model.py --out runs/own-model`` trains. The log is for
reading; ``--json`` writes the same numbers for docs/claims/ to check the page against: the
gatherer and its located score (the one ``analyze`` and ``locate`` print), the sequences and seed,
the mean weight from ``=`` on every position and on each operand, and the count of sequences per pair
of positions holding the two largest weights (``"0,14"``: the first context position and the right
operand).
"""

from __future__ import annotations

import argparse
from pathlib import Path

import torch

from compose_lens.analysis import probes
from compose_lens.analysis.locate import circuit_heads, head_scores
from compose_lens.core.files import write_json_atomic
from compose_lens.training.subject import for_analyses, load_subject

SEQUENCES, SEED = 300, 0

parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
parser.add_argument("model", help="the own model's folder (experiments/own_model.py --out)")
parser.add_argument("--json", type=Path, help="also write the numbers here (experiments/results/own_model/gatherer.json)")
args = parser.parse_args()
if args.json is not None and args.json.is_dir():
    parser.error(f"--json {args.json}: is a folder; name the JSON file to write")

subject = for_analyses(load_subject(args.model, bridge=False))
heads = circuit_heads(subject, SEED)
layer, head = heads.gatherer
acts = probes.probe_activations(subject, SEQUENCES, SEED, heads=heads)
pattern = probes.gatherer_pattern(acts)
mean = pattern.mean(0).tolist()
print(f"gatherer: blocks.{layer} head {head}; {SEQUENCES} sequences, seed {SEED}")
print("mean attention from = by position:", " ".join(f"{i}:{v:.3f}" for i, v in enumerate(mean)))
pairs, counts = torch.unique(pattern.topk(2, dim=-1).indices.sort(-1).values, dim=0, return_counts=True)
for pair, count in zip(pairs.tolist(), counts.tolist()):
    print(f"two largest weights on positions {pair}: {count} sequences")

if args.json is not None:
    scores = head_scores(subject, seed=SEED)  # what circuit_heads scored
    located = scores[(scores["role"] == "gatherer") & (scores["layer"] == layer) & (scores["head"] == head)]
    left, right = subject.config.task.seq_len - 3, subject.config.task.seq_len - 2  # op x y = (study's order)
    write_json_atomic(args.json, {
        "gatherer": f"blocks.{layer} head {head}", "located_score": float(located["score"].iloc[0]),
        "sequences": SEQUENCES, "seed": SEED, "mean_attention_from_eq": mean,
        "left_operand": {"position": left, "weight": mean[left]},
        "right_operand": {"position": right, "weight": mean[right]},
        "two_largest_on": {",".join(map(str, pair)): count for pair, count in zip(pairs.tolist(), counts.tolist())},
    })
