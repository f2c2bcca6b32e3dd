"""The measurements behind the rewritten claims of issue 44, on the shipped paper model and the study's final checkpoint.

    python experiments/claim_measures.py      # writes experiments/results/claims/measures.json

For each model (``paper``, and ``../shared/reference/final.pth`` where it exists):

* **layer-1 positional QK** (``P W_Q (P W_K)^T / sqrt(d_head)`` over the context,
  :func:`compose_lens.analysis.probes.positional_qk_scores`, counted by
  :func:`compose_lens.analysis.probes.positional_peaks`): for how many query positions the largest
  score over the keys it may attend to (j <= i) is the diagonal (j = i), and for how many it is the
  position before (j = i - 1). A peak "just below the diagonal" would be the second;
* **MLP2's key frequencies** (:func:`compose_lens.analysis.fourier.key_frequency_strength` on the
  constant-operand grid): the share of the neurons' non-constant variance over (x, y) in the key
  frequencies, on the post-ReLU activations (what the Fourier measures read) and on the
  pre-activations;
* **additivity of MLP2's input to its neurons**: the share of each neuron's pre-activation
  variance over the p x p grid that a sum f(x) + g(y) explains (the grid's row and column means,
  a two-way layout without interaction), pooled over neurons. Near 1, a neuron computes
  ReLU(f(x) + g(y)), and any cos k(x + y)-like tuning comes from the ReLU acting on that sum.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from compose_lens.analysis import fourier, probes  # noqa: E402
from compose_lens.training.subject import load_model  # noqa: E402

OUT = ROOT / "experiments" / "results" / "claims" / "measures.json"
REFERENCE = ROOT.parent / "shared" / "reference" / "final.pth"


def additive_share(pre: torch.Tensor) -> float:
    """Share of the pre-activations' variance over (x, y) explained by f(x) + g(y), all neurons pooled."""
    centred = pre - pre.mean(dim=(0, 1), keepdim=True)
    additive = centred.mean(dim=1, keepdim=True) + centred.mean(dim=0, keepdim=True)
    return 1 - ((centred - additive).pow(2).sum() / centred.pow(2).sum()).item()


def measure(spec: str) -> dict:
    loaded = load_model(spec)
    model, config = loaded.model, loaded.config
    grid = fourier.operand_grid(loaded, "constant")
    keys = fourier.key_frequencies(grid)
    return {
        "model": spec,
        "positional_qk": probes.positional_peaks(probes.positional_qk_scores(model, config)),
        "key_frequencies": keys,
        "key_frequency_share_post_relu": fourier.key_frequency_strength(grid, keys),
        "key_frequency_share_pre_activation": fourier.key_frequency_strength(grid.mlp_pre, keys),
        "pre_activation_additive_share": additive_share(grid.mlp_pre),
    }


def main() -> int:
    specs = ["paper"] + ([str(REFERENCE)] if REFERENCE.exists() else [])
    found = {("final.pth" if spec != "paper" else "paper"): measure(spec) for spec in specs}
    OUT.parent.mkdir(parents=True, exist_ok=True)
    OUT.write_text(json.dumps(found, indent=2) + "\n")
    for name, m in found.items():
        qk = m["positional_qk"]
        print(f"{name}: positional QK peaks on the diagonal at {qk['on_diagonal']} of {qk['query_positions']} "
              f"query positions, just below at {qk['just_below']}; key frequencies {m['key_frequencies']}: "
              f"{m['key_frequency_share_post_relu']:.2f} of the post-ReLU variance, "
              f"{m['key_frequency_share_pre_activation']:.2f} of the pre-activation variance; pre-activations "
              f"{m['pre_activation_additive_share']:.3f} additive")
    print(f"wrote {OUT}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
