"""Where the own model's layer-1 head looks from ``=`` (docs/own-model.md): the mean attention of the located
gatherer over the positions, in the study's coordinates (the operands at 13 and 14), and how often each
pair of positions holds its two largest weights.

    python experiments/own_model_gatherer.py runs/own-model > experiments/results/own_model/gatherer.log
"""

import sys

import torch

from compose_lens.analysis import probes
from compose_lens.analysis.locate import circuit_heads
from compose_lens.runs import for_analyses, load_subject

if len(sys.argv) != 2:
    sys.exit("usage: python experiments/own_model_gatherer.py MODEL_DIR")
subject = for_analyses(load_subject(sys.argv[1], bridge=False))
heads = circuit_heads(subject.model, subject.config, subject.split, 0)
acts = probes.probe_activations(subject.model, subject.config, subject.split, 300, 0, heads=heads)
pattern = probes.gatherer_pattern(acts)
print(f"gatherer: blocks.{heads.gatherer[0]} head {heads.gatherer[1]}; 300 sequences, seed 0")
print("mean attention from = by position:", " ".join(f"{i}:{v:.3f}" for i, v in enumerate(pattern.mean(0).tolist())))
pairs, counts = torch.unique(pattern.topk(2, dim=-1).indices.sort(-1).values, dim=0, return_counts=True)
for pair, count in zip(pairs.tolist(), counts.tolist()):
    print(f"two largest weights on positions {pair}: {count} sequences")
