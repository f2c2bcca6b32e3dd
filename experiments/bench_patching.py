"""Benchmark: batched activation patching against transformer_lens.patching's per-site loop.

Both compute the full (component x layer x position[, head]) sweep of the logit
difference over the same prompt pairs in one process; the script checks that they
give the same numbers, then prints both times and the ratio.

    .venv/bin/python experiments/bench_patching.py [MODEL] [--n-pairs 1000] [--corruption value]

MODEL defaults to the study's reference checkpoint ../shared/reference/final.pth, or to the
shipped paper model where that folder is absent.
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path

import torch

from compose_lens.data import pairs as prompt_pairs
from compose_lens.registry.patching import tables
from compose_lens.training.subject import load_model
from tl_patching import transformer_lens_logit_diffs  # experiments/tl_patching.py, beside this script

_REFERENCE = Path(__file__).resolve().parents[2] / "shared" / "reference" / "final.pth"
DEFAULT_MODEL = _REFERENCE if _REFERENCE.exists() else "paper"  # the shipped paper model otherwise


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("model", nargs="?", default=str(DEFAULT_MODEL))
    parser.add_argument("--n-pairs", type=int, default=1000)
    parser.add_argument("--corruption", default="value", choices=prompt_pairs.CORRUPTIONS)
    parser.add_argument("--threads", type=int, default=2)
    args = parser.parse_args()
    torch.set_num_threads(args.threads)

    loaded = load_model(args.model)
    cfg = loaded.config.model
    pairs = prompt_pairs.make_prompt_pairs(loaded.split, args.n_pairs, args.corruption)
    sites = tables.all_sites(cfg)
    print(f"model {loaded.source}: {len(sites)} sites x {len(pairs)} prompt pairs ({args.corruption})")

    start = time.perf_counter()
    batched = tables.patched_values(loaded.model, cfg, pairs, sites)
    t_batched = time.perf_counter() - start

    start = time.perf_counter()
    tl_sites, baseline = transformer_lens_logit_diffs(loaded.model, cfg, pairs)
    t_tl = time.perf_counter() - start

    assert tl_sites == sites, "the two sweeps enumerate sites differently"
    diff = (batched - baseline).abs().max().item()
    scale = baseline.abs().max().item()
    agree = diff <= 1e-4 * max(1.0, scale)
    print(f"max |batched - transformer_lens| = {diff:.2e} (largest |logit diff| {scale:.1f}): "
          f"{'agree' if agree else 'DISAGREE'}")
    print(f"batched engine:           {t_batched:8.2f} s")
    print(f"transformer_lens.patching: {t_tl:8.2f} s")
    print(f"speed-up: {t_tl / t_batched:.1f}x")
    if not agree:
        raise SystemExit(1)


if __name__ == "__main__":
    main()
