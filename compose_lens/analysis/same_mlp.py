"""Does the SAME layer-2 MLP add for constant and for variable operands? (SPEC 6, item 5)

The claim: layer-1 attention and layer-2 routing bring a variable's value to ``=``
in the same form a constant operand arrives in, and one MLP (``blocks.1.mlp``,
paper "MLP2") then adds, whatever the operands' origin. Three kinds of evidence,
each compared between ``+ x y =`` (constants) and ``+ v y =`` / ``+ x w =`` with
``v`` bound to x (``w`` to y) in the context, for the same values (x, y):

1. **Correlational.** The MLP2 input at ``=`` (``blocks.1.mlp.hook_in``, last
   position) should be nearly the same vector for the two prompts of a matched
   (x, y), and less alike for mismatched values. Raw cosines share a large
   prompt-independent offset, so they are also reported *centred* (the mean MLP2
   input over all prompts subtracted). And the layer-2 attention output at ``=``
   should be predicted, up to a scale, by ``OV2 e_x + OV2 e_y`` (the two value
   tokens' embeddings through layer 2's OV circuit): cosine and R^2 of the best
   single scale, for constant and variable prompts.
2. **Causal patching.** Run a variable prompt, but feed its MLP2 the input it
   would have had on the constant prompt (and back). If the MLP only sees "x and
   y" and not where they came from, the answer survives a matched patch; with a
   donor of other values the output should follow the donor's sum. The same with
   the whole layer-2 attention output at ``=`` (``blocks.1.hook_attn_out``), which
   also reaches the unembedding directly. Patching ``mlp.hook_in`` replaces only
   the MLP's input; the residual stream beside it keeps the receiver's values.
3. **Ablation of the key frequencies.** Mean-ablate MLP2's output along the
   Fourier directions of its key frequencies (and, separately, the neurons of
   each key frequency) and compare the accuracy lost on the 0-var, 1-var and
   2-var pools. One adder serving all three loses alike on all three.

The ``conclusion`` is computed from these numbers against the thresholds in
:data:`THRESHOLDS` (reported with it); nothing in it is written in advance.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

from compose_lens.analysis.ablation import (
    LastPositionMLP, fourier_ablation_logits, neuron_ablation_logits, neuron_groups_by_frequency,
    reference_tokens)
from compose_lens.config import ComposeLensError, RunConfig
from compose_lens.data import streams
from compose_lens.data.sampler import make_pool, render
from compose_lens.data.split import Split
from compose_lens.model import tl, weights
from compose_lens.provenance import provenance

MLP_IN = "blocks.1.mlp.hook_in"
ATTN_OUT = "blocks.1.hook_attn_out"

THRESHOLDS = {
    "centred_cosine_gap": 0.2,    # matched - mismatched centred cosine of the MLP2 input
    "patched_accuracy": 0.9,      # accuracy after a matched patch, both directions
    "donor_following": 0.8,       # share answering the donor's sum after a mismatched patch
    "ablation_loss": 0.3,         # key-frequency ablation must cost at least this on every pool
    "ablation_spread": 0.15,      # ... and lose alike: max - min loss over 0/1/2-var pools
}


def matched_prompts(split: Split, n: int, side: str, seed: int = 0) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """(constant tokens, variable tokens, labels) for the same n training pairs (x, y).

    ``side`` ``left``: ``+ v y =`` with v bound to x; ``right``: ``+ x w =``. Contexts
    are drawn independently for the two prompts.
    """
    task = split.task
    g = streams.derived_generator(seed, streams.SAME_MLP, 0 if side == "left" else 1)
    pairs = split.train_pairs[torch.randint(0, len(split.train_pairs), (n,), generator=g)]
    none = torch.full((n,), -1, dtype=torch.long)
    allowed = torch.tensor(task.allowed_left if side == "left" else task.allowed_right)
    var = allowed[torch.randint(0, len(allowed), (n,), generator=g)]
    const_rows = torch.stack([pairs[:, 0], pairs[:, 1], none, none], 1)
    var_rows = torch.stack([pairs[:, 0], pairs[:, 1], var if side == "left" else none,
                            var if side == "right" else none], 1)
    const = render(split, const_rows, g)
    varb = render(split, var_rows, g)
    return const.tokens, varb.tokens, const.labels


def _last(model: tl.Model, tokens: torch.Tensor, names: list[str]) -> dict[str, torch.Tensor]:
    with torch.no_grad():
        logits, cache = tl.run_with_cache(model, tokens, names_filter=lambda n: n in names)
    out = {n: cache[n][:, -1].float() for n in names}
    out["logits"] = logits[:, -1].float()
    return out


def _mismatch(labels: torch.Tensor, g: torch.Generator) -> torch.Tensor:
    """A permutation whose partner has another answer wherever possible (a shifted random order)."""
    n = len(labels)
    order = torch.randperm(n, generator=g)
    partner = torch.empty(n, dtype=torch.long)
    partner[order] = order.roll(1)
    same = labels[partner] == labels
    for shift in range(2, min(n, 50)):  # re-pair the few collisions
        if not same.any():
            break
        alt = torch.empty(n, dtype=torch.long)
        alt[order] = order.roll(shift)
        partner = torch.where(same, alt, partner)
        same = labels[partner] == labels
    return partner


def _cos(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    return F.cosine_similarity(a, b, dim=-1)


def cosine_similarities(h_const: torch.Tensor, h_var: torch.Tensor, labels: torch.Tensor,
                        g: torch.Generator) -> dict:
    """Mean cosine of the MLP2 input, matched (same x, y) against mismatched pairs, raw and centred."""
    partner = _mismatch(labels, g)
    centre = torch.cat([h_const, h_var]).mean(0)
    out = {}
    for name, (a, b) in {"raw": (h_const, h_var), "centred": (h_const - centre, h_var - centre)}.items():
        out[name] = {"matched": _cos(a, b).mean().item(), "mismatched": _cos(a, b[partner]).mean().item()}
    return out


def ov_prediction(model: tl.Model, x: torch.Tensor, y: torch.Tensor, attn_out: torch.Tensor) -> dict:
    """How well ``OV2 e_x + OV2 e_y`` predicts layer 2's attention output at ``=``: cosine, R^2 of a scale."""
    E = tl.parameters(model)["embed.weight"].detach().float().cpu()
    ov = weights.head_weights(model, 1, head=None)  # every head: OV2 is their sum
    pred = (E[x] + E[y]) @ ov.W_V @ ov.W_O
    attn_out = attn_out.float().cpu()
    scale = (pred * attn_out).sum() / (pred * pred).sum()
    residual = (attn_out - scale * pred).pow(2).sum()
    total = (attn_out - attn_out.mean(0)).pow(2).sum()
    return {"cosine": _cos(pred, attn_out).mean().item(), "scale": scale.item(),
            "r2": (1 - residual / total).item()}


def patch_last(model: tl.Model, receiver: torch.Tensor, donor_act: torch.Tensor, hook: str) -> torch.Tensor:
    """Last-position logits of ``receiver`` with ``hook`` at ``=`` replaced by ``donor_act`` (N, d).

    ``blocks.1.mlp.hook_in`` gets a new tensor (only the MLP reads it); other hooks are
    written in place, so every reader of the activation sees the patch.
    """
    def write(act: torch.Tensor, hook=None) -> torch.Tensor:
        if hook_is_mlp_in:
            act = act.clone()
        act[:, -1] = donor_act.to(act.dtype)
        return act

    hook_is_mlp_in = hook == MLP_IN
    with torch.no_grad():
        return tl.run_with_hooks(model, receiver, [(hook, write)])[:, -1].float()


def patching_recovery(model: tl.Model, const: torch.Tensor, var: torch.Tensor, labels: torch.Tensor,
                      acts_const: dict, acts_var: dict, g: torch.Generator) -> dict:
    """Accuracy after patching between constant and variable runs, matched and mismatched donors."""
    partner = _mismatch(labels, g)
    out = {}
    for hook, short in ((MLP_IN, "mlp_in"), (ATTN_OUT, "attn_out")):
        for direction, receiver, donor in (("constant_to_variable", var, acts_const),
                                           ("variable_to_constant", const, acts_var)):
            matched = patch_last(model, receiver, donor[hook], hook).argmax(-1)
            crossed = patch_last(model, receiver, donor[hook][partner], hook).argmax(-1)
            out[f"{short}/{direction}"] = {
                "matched_accuracy": (matched == labels).float().mean().item(),
                "mismatched_follows_donor": (crossed == labels[partner]).float().mean().item(),
                "mismatched_keeps_own": (crossed == labels).float().mean().item(),
            }
    return out


def ablation_losses(model: tl.Model, config: RunConfig, split: Split, pool_size: int, seed: int) -> dict:
    """Accuracy lost on the 0-var, 1-var and 2-var training pools when MLP2's key frequencies
    are mean-ablated: all key directions together, each frequency's directions, each one's neurons."""
    pools = {name: make_pool(split, f"{name}_train", pool_size, seed) for name in ("0var", "1var", "2var")}
    groups = neuron_groups_by_frequency(model, config, split, seed)
    keys = sorted(groups)
    ref = LastPositionMLP(model, config, reference_tokens(split, 1000, seed))
    result: dict = {"key_frequencies": keys, "kind": "mean", "pools": {}}
    for name, batch in pools.items():
        mlp = LastPositionMLP(model, config, batch.tokens)

        def acc(logits: torch.Tensor) -> float:
            return (logits.argmax(-1) == batch.labels).float().mean().item()

        base = acc(mlp.logits())
        entry = {"baseline_accuracy": base}
        if keys:
            entry["all_key_directions"] = base - acc(fourier_ablation_logits(mlp, ref, keys, "mean", seed))
            entry["directions"] = {str(k): base - acc(fourier_ablation_logits(mlp, ref, k, "mean", seed))
                                   for k in keys}
            entry["neurons"] = {str(k): base - acc(next(neuron_ablation_logits(mlp, ref, [groups[k]], "mean", seed))[1])
                                for k in keys if groups[k]}
            all_neurons = sorted(i for k in keys for i in groups[k])
            if all_neurons:
                entry["all_key_neurons"] = base - acc(next(neuron_ablation_logits(mlp, ref, [all_neurons], "mean", seed))[1])
        result["pools"][name] = entry
    return result


def _verdict(report: dict) -> dict:
    """The conclusion, from the numbers and THRESHOLDS only."""
    t = THRESHOLDS
    checks = {}
    gaps = [c["centred"]["matched"] - c["centred"]["mismatched"] for c in report["cosine"].values()]
    checks["correlational"] = {
        "passed": min(gaps) >= t["centred_cosine_gap"],
        "detail": f"centred cosine gap (matched - mismatched) {min(gaps):.3f}, threshold {t['centred_cosine_gap']}"}
    mlp = [v for k, v in report["patching"].items() if k.startswith("mlp_in/")]
    worst_acc = min(v["matched_accuracy"] for v in mlp)
    worst_follow = min(v["mismatched_follows_donor"] for v in mlp)
    checks["causal_patching"] = {
        "passed": worst_acc >= t["patched_accuracy"] and worst_follow >= t["donor_following"],
        "detail": f"MLP2-input patch: lowest matched accuracy {worst_acc:.3f} (threshold {t['patched_accuracy']}), "
                  f"lowest donor-following {worst_follow:.3f} (threshold {t['donor_following']})"}
    pools = report["ablation"]["pools"]
    if "all_key_directions" in pools["0var"]:
        losses = {k: v["all_key_directions"] for k, v in pools.items()}
        spread = max(losses.values()) - min(losses.values())
        checks["ablation"] = {
            "passed": min(losses.values()) >= t["ablation_loss"] and spread <= t["ablation_spread"],
            "detail": "accuracy lost with the key-frequency directions mean-ablated: "
                      + ", ".join(f"{k} {v:.3f}" for k, v in losses.items())
                      + f" (each >= {t['ablation_loss']}, spread {spread:.3f} <= {t['ablation_spread']})"}
    else:
        checks["ablation"] = {"passed": False, "detail": "no key frequency found in MLP2"}
    passed = [name for name, c in checks.items() if c["passed"]]
    if len(passed) == len(checks):
        verdict = "supported: one MLP2 serves constant and variable operands (all checks pass)"
    elif not checks["causal_patching"]["passed"]:
        verdict = "not supported: patching the MLP2 input between constant and variable runs does not carry the answer"
    else:
        failed = ", ".join(n for n in checks if n not in passed)
        verdict = f"partly supported: the causal patching check passes, {failed} does not"
    return {"verdict": verdict, "checks": checks, "thresholds": dict(THRESHOLDS)}


def same_mlp_report(model: tl.Model, config: RunConfig, split: Split, seed: int = 0, *,
                    n_prompts: int = 1000, pool_size: int = 1000) -> dict:
    """The three tests of the module docstring; a JSON-serialisable dict with the conclusion."""
    if not weights.has_paper_layout(config.model):
        raise ComposeLensError("the same-MLP test is about the study's layout: two layers, "
                               "an MLP in the second (blocks.1) only")
    g = streams.derived_generator(seed, streams.SAME_MLP, 2)
    report: dict = {**provenance(config, seed), "n_prompts": n_prompts, "pool_size": pool_size,
                    "cosine": {}, "ov_prediction": {}, "patching": {}, "accuracy_unpatched": {}}
    was_training = model.training
    model.eval()
    try:
        for side in ("left", "right"):
            const, var, labels = matched_prompts(split, n_prompts, side, seed)
            acts_const = _last(model, const, [MLP_IN, ATTN_OUT])
            acts_var = _last(model, var, [MLP_IN, ATTN_OUT])
            report["cosine"][side] = cosine_similarities(acts_const[MLP_IN], acts_var[MLP_IN], labels, g)
            x, y = const[:, split.task.context_len + 1], const[:, split.task.context_len + 2]
            report["ov_prediction"][f"constant_{side}"] = ov_prediction(model, x, y, acts_const[ATTN_OUT])
            report["ov_prediction"][f"variable_{side}"] = ov_prediction(model, x, y, acts_var[ATTN_OUT])
            report["accuracy_unpatched"][f"constant_{side}"] = (acts_const["logits"].argmax(-1) == labels).float().mean().item()
            report["accuracy_unpatched"][f"variable_{side}"] = (acts_var["logits"].argmax(-1) == labels).float().mean().item()
            for key, value in patching_recovery(model, const, var, labels, acts_const, acts_var, g).items():
                report["patching"][f"{key}/{side}"] = value
        report["ablation"] = ablation_losses(model, config, split, pool_size, seed)
    finally:
        model.train(was_training)
    report["conclusion"] = _verdict(report)
    return report
