"""Why do some runs stall? The circuit, the trajectories and the gradient of stalled runs.

    python experiments/stall_mechanism.py            # ~2-4 minutes on one thread

A stalled run (:mod:`compose_lens.training.outcome`) learns addition but never forms layer-2
routing: the ``=`` token must attend, in layer 2, to the *value* positions of the two operand
variables, which it can only find if layer 1 has copied each variable's name onto the position
of its value (the previous-token head) and has attended from ``=`` to the two operands. This
script asks the toolkit three questions and writes its answers as tables and figures:

1. **Which piece of the circuit is missing?** :func:`circuit_measures` (the cheap per-checkpoint
   probes of :mod:`compose_lens.registry.probes.summary`) at every saved checkpoint of the stall-rate
   runs (``experiments/results/stall_rate/*/runs/*/checkpoints``, local only) and at the study's
   dense reference window (``../shared/reference/step_{2501..6001}.pth`` every 500 steps, a
   trajectory whose routing formed at ~5.4k). Layer-1 pieces (previous-token head,
   ``=``-to-operands) against layer-2 pieces (``variable_identity_score``,
   ``equals_to_values_*``), stalled against routed.
   -> ``mechanism_measures.csv``, ``docs/figures/stalls_measures.png``.
2. **When do trajectories separate?** The logged 1-var accuracies (``metrics.jsonl``, every 100
   steps) of every decided run at the study's setting (f = 0.7, r = 1; the stall-rate runs, the
   r-sweep's r = 1 runs and the committed ``seeds/`` dynamics tables), coloured by outcome, and
   for each step the counts of a one-threshold rule "1-var accuracy below 0.7 at step S means
   the run will stall" (:func:`separation`). -> ``mechanism_separation.csv``,
   ``docs/figures/stalls_trajectories.png``.
3. **What does the gradient do at a stalled checkpoint?** The norm of the training-loss gradient
   per parameter group (:data:`GROUPS`; :func:`group_gradients`) on the 512-sequence training
   batch the run drew at that step, on the whole batch and on its 0-, 1- and 2-variable rows,
   with the cosine between the gradients of the batch's two halves (how consistent the
   direction is from batch to batch). The loss is the one the trainer minimises: cross-entropy
   of :func:`compose_lens.model.fastpath.last_position_logits`. -> ``mechanism_gradients.csv``,
   ``docs/figures/stalls_gradients.png``.

A run whose checkpoints are absent (they are git-ignored; a fresh clone has only the metrics) is
skipped with a note; parts 2 needs only the committed metrics.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import pandas as pd
import torch
import torch.nn.functional as F

from compose_lens.training import runs
from compose_lens.analysis.activations import collect
from compose_lens.training.outcome import ROUTING_POOLS, classify_run, onsets
from compose_lens.registry.probes.summary import MEASURE_KEYS, circuit_measures, measure_inputs
from compose_lens.data.sampler import TrainingSampler
from compose_lens.data.split import row_types
from compose_lens.model import fastpath, tl
from compose_lens.training.subject import Subject, load_weights

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "experiments" / "results"
OUT = RESULTS / "stall_rate"
FIGURES = ROOT / "docs" / "figures"
REFERENCE = ROOT.parent / "shared" / "reference"
REFERENCE_STEPS = range(2501, 6002, 500)
BATCH = 512
THRESHOLD = 0.7  # between the stalled plateau (~0.55) and the routing level (0.9)
SEPARATION_STEPS = range(500, 8001, 500)
UNDECIDED_BEFORE = 10_000  # an unfinished run without routing by here is counted as stalled (flagged)
COLOURS = {"stalled": "tab:red", "routed": "tab:blue", "reference": "black", "remedy": "tab:green",
           "undecided": "tab:grey"}

# parameter groups: (name, test on the bridge's parameter name)
GROUPS = (
    ("L1 W_Q/W_K", lambda n: n.startswith("blocks.0.attn.") and n[14] in "qk"),
    ("L1 W_V/W_O", lambda n: n.startswith("blocks.0.attn.") and n[14] in "vo"),
    ("L2 W_Q/W_K", lambda n: n.startswith("blocks.1.attn.") and n[14] in "qk"),
    ("L2 W_V/W_O", lambda n: n.startswith("blocks.1.attn.") and n[14] in "vo"),
    ("MLP", lambda n: ".mlp." in n),
    ("embeddings", lambda n: n.startswith(("embed.", "pos_embed."))),
    ("unembedding", lambda n: n.startswith("unembed.")),
)


def group_of(name: str) -> str:
    """The parameter group of a parameter name (every trainable parameter has exactly one)."""
    found = [g for g, test in GROUPS if test(name)]
    if len(found) != 1:
        raise ValueError(f"{name}: in groups {found}")
    return found[0]


# -- part 1: where layer 1's "=" looks, by operand kind -----------------------------------


def operand_attention(model: tl.Model, config, tokens: torch.Tensor) -> dict[str, float]:
    """Mean layer-1 attention weight from ``=`` on each operand position, split by what the
    operand is: in 1-var sequences on the variable operand and on the constant one, in 0-var and
    2-var sequences on both operands together. ``equals_to_operands_score`` pools the sequence
    types; this says which operands the head reaches."""
    pattern = collect(model, config.model, tokens).pattern0[:, -1]  # (B, n) from "="
    n = tokens.shape[1]
    is_var = tokens[:, [n - 3, n - 2]] >= config.task.first_var_token  # (B, 2) left, right operand
    on = pattern[:, [n - 3, n - 2]]
    one = is_var.sum(1) == 1
    return {"l1_eq_on_var_operand_1var": on[one][is_var[one]].mean().item(),
            "l1_eq_on_const_operand_1var": on[one][~is_var[one]].mean().item(),
            "l1_eq_on_operands_0var": on[is_var.sum(1) == 0].sum(1).mean().item(),
            "l1_eq_on_operands_2var": on[is_var.sum(1) == 2].sum(1).mean().item()}


# -- part 3: gradients ------------------------------------------------------------------


def group_gradients(model: tl.Model, cfg, tokens: torch.Tensor, labels: torch.Tensor
                    ) -> tuple[float, dict[str, torch.Tensor]]:
    """(loss, {group: flattened gradient}) of the mean training loss on ``tokens``.

    The sum over groups of the squared group norms is the squared norm of the full gradient
    (the groups partition the trainable parameters)."""
    params = {k: v for k, v in tl.parameters(model).items() if v.requires_grad}
    loss = F.cross_entropy(fastpath.last_position_logits(tl.parameters(model), cfg, tokens).float(), labels)
    grads = torch.autograd.grad(loss, list(params.values()))
    out: dict[str, list[torch.Tensor]] = {g: [] for g, _ in GROUPS}
    for name, grad in zip(params, grads):
        out[group_of(name)].append(grad.flatten())
    return loss.item(), {g: torch.cat(v) for g, v in out.items() if v}


def gradient_rows(model: tl.Model, cfg, batch) -> list[dict]:
    """Per group and batch subset (all, 0var, 1var, 2var): gradient norm, share of the squared
    full norm, parameter norm and the cosine between the two half-batches' gradients."""
    params = {k: v for k, v in tl.parameters(model).items() if v.requires_grad}
    param_norm = {g: torch.cat([p.detach().flatten() for n, p in params.items() if group_of(n) == g]).norm().item()
                  for g, _ in GROUPS}
    types = row_types(batch.rows)
    subsets = {"all": torch.ones_like(types, dtype=torch.bool), "0var": types == 0,
               "1var": (types == 1) | (types == 2), "2var": types == 3}
    rows = []
    for subset, mask in subsets.items():
        idx = mask.nonzero().flatten()
        loss, grad = group_gradients(model, cfg, batch.tokens[idx], batch.labels[idx])
        half = len(idx) // 2
        _, g1 = group_gradients(model, cfg, batch.tokens[idx[:half]], batch.labels[idx[:half]])
        _, g2 = group_gradients(model, cfg, batch.tokens[idx[half:]], batch.labels[idx[half:]])
        total = sum(v.square().sum() for v in grad.values()).item()
        for g, v in grad.items():
            rows.append({"subset": subset, "n": len(idx), "loss": loss, "group": g,
                         "grad_norm": v.norm().item(), "share": v.square().sum().item() / total,
                         "param_norm": param_norm[g],
                         "half_cosine": F.cosine_similarity(g1[g], g2[g], dim=0).item()})
    return rows


# -- part 2: the early predictor ----------------------------------------------------------


def value_at(curve: pd.DataFrame, column: str, step: int) -> float | None:
    """The logged value at ``step`` (None where the run logged none there)."""
    hit = curve.loc[curve["step"] == step, column]
    return float(hit.iloc[0]) if len(hit) else None


def separation(curves: dict[str, pd.DataFrame], labels: dict[str, str], column: str = "1var_train",
               steps=SEPARATION_STEPS, threshold: float = THRESHOLD) -> pd.DataFrame:
    """Per step S: how well "``column`` < ``threshold`` at S" predicts a stall, as counts over the
    runs labelled stalled or routed that logged S; and whether any threshold separates the two
    groups at S (``separable``: the highest stalled value is below the lowest routed one)."""
    out = []
    for step in steps:
        vals = {lab: [v for name, c in curves.items() if labels[name] == lab
                      and (v := value_at(c, column, step)) is not None] for lab in ("stalled", "routed")}
        st, ro = vals["stalled"], vals["routed"]
        out.append({"measure": column, "step": step, "threshold": threshold, "stalled_runs": len(st),
                    "routed_runs": len(ro), "stalled_flagged": sum(v < threshold for v in st),
                    "stalled_missed": sum(v >= threshold for v in st),
                    "routed_flagged": sum(v < threshold for v in ro), "routed_clear": sum(v >= threshold for v in ro),
                    "max_stalled": max(st, default=float("nan")), "min_routed": min(ro, default=float("nan")),
                    "separable": bool(st and ro and max(st) < min(ro))})
    return pd.DataFrame(out)


def earliest_separating_step(table: pd.DataFrame) -> int | None:
    """The first step of ``table`` (one measure) from which every later step is separable."""
    table = table.sort_values("step")
    ok = table["separable"].tolist()
    for i in range(len(ok)):
        if all(ok[i:]):
            return int(table["step"].iloc[i])
    return None


# -- the runs -----------------------------------------------------------------------------


def with_routing(table: pd.DataFrame) -> pd.DataFrame:
    table = table.copy()
    table["routing_accuracy"] = table[list(ROUTING_POOLS)].mean(axis=1)
    return table


def label_run(run_dir: Path) -> tuple[str, bool]:
    """(routed | stalled | undecided, finished) from the stall detector and the logged pools."""
    found = classify_run(run_dir)
    finished = (run_dir / "results.json").exists()
    if found["routing_formed_step"] is not None:
        return "routed", finished
    if found["outcome"] == "stalled" or found["last_step"] >= UNDECIDED_BEFORE:
        return "stalled", finished
    return "undecided", finished


def study_setting(run_dir: Path) -> bool:
    task = json.loads((run_dir / "config.json").read_text())["task"]
    return (task["f"], task["r"]) == (0.7, 1.0)


def metric_curves() -> tuple[dict[str, pd.DataFrame], dict[str, str], dict[str, bool]]:
    """Every run at the study's setting with the study's recipe: curves, labels, finished."""
    dirs = sorted((RESULTS / "stall_rate" / "fp32" / "runs").glob("*")) + \
        sorted((RESULTS / "sweeps").glob("*/runs/*"))
    curves, labels, finished = {}, {}, {}
    for d in dirs:
        if not (d / "metrics.jsonl").exists() or not study_setting(d):
            continue
        name = str(d.relative_to(RESULTS))
        curves[name] = with_routing(pd.DataFrame(runs.read_metrics(d)))
        labels[name], finished[name] = label_run(d)
    for path in sorted((RESULTS / "seeds").glob("dynamics_seed*.csv")):  # committed, finished runs
        name = f"seeds/{path.stem.removeprefix('dynamics_')}"
        curves[name] = with_routing(pd.read_csv(path))
        labels[name], finished[name] = ("routed" if onsets(curves[name].to_dict("records"))["routing"]
                                        else "stalled"), True
    return curves, labels, finished


def checkpoint_sources(labels: dict[str, str]) -> list[tuple[str, str, Path, list[int] | None]]:
    """(name, label, source, steps) for each run with checkpoints and the reference window."""
    out = []
    for d in sorted((RESULTS / "stall_rate").glob("*/runs/*")):
        name = str(d.relative_to(RESULTS))
        if not (d / "checkpoints").is_dir():
            print(f"skip {name}: no checkpoints/ here (they are git-ignored; retrain to make them)")
            continue
        remedy = "remedy" in d.parent.parent.name
        out.append((name, "remedy" if remedy else labels.get(name, label_run(d)[0]), d, None))
    if (REFERENCE / "split.json").exists():
        out.append(("reference (study)", "reference", REFERENCE, list(REFERENCE_STEPS)))
    else:
        print(f"skip the reference window: {REFERENCE} is absent")
    return out


def measure_and_gradients(sources) -> tuple[pd.DataFrame, pd.DataFrame]:
    measures, grads = [], []
    for name, label, source, steps in sources:
        checkpoints, config, split = runs.find_checkpoints(source)
        if steps is not None:
            checkpoints = runs.select_checkpoints(checkpoints, steps)
        inputs = measure_inputs(split)
        sampler = TrainingSampler(split, BATCH, config.train.seed)
        model = tl.boot(config.model, "cpu", config.task)  # each checkpoint's weights are loaded into it
        subject = Subject(model, config, split, str(source))
        metrics = {} if label == "reference" else {int(r["step"]): r for r in runs.read_metrics(source)}
        print(f"{name} ({label}): {len(checkpoints)} checkpoints")
        for ckpt in checkpoints:
            load_weights(model, config, runs.read_state(ckpt, config), str(ckpt.path))
            logged = metrics.get(ckpt.step, {})
            row = {"run": name, "label": label, "step": ckpt.step, "1var_train": logged.get("1var_train"),
                   "routing_accuracy": (sum(logged[p] for p in ROUTING_POOLS) / 2) if logged else None}
            with torch.no_grad():
                measures.append({**row, **circuit_measures(subject, inputs=inputs),
                                 **operand_attention(model, config, inputs.probe_tokens)})
            grads += [{**row, **g} for g in gradient_rows(model, config.model, sampler.batch(ckpt.step))]
    return pd.DataFrame(measures), pd.DataFrame(grads)


# -- figures ------------------------------------------------------------------------------


def _plt():
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    return plt


def _legend(ax, labels):
    from matplotlib.lines import Line2D
    ax.legend([Line2D([], [], color=COLOURS[k]) for k in labels], labels, fontsize=7, loc="lower right")


FIG_MEASURES = ("prev_token_attention_mass", "prev_token_probe_accuracy", "l1_eq_on_operands_0var",
                "l1_eq_on_const_operand_1var", "l1_eq_on_var_operand_1var", "l1_eq_on_operands_2var",
                "variable_identity_score", "equals_to_values_mass", "ov_mlp_addition_accuracy")


def plot_measures(table: pd.DataFrame, path: Path) -> None:
    plt = _plt()
    fig, axes = plt.subplots(3, 3, figsize=(10, 7.5), sharex=True)
    for ax, key in zip(axes.flat, FIG_MEASURES):
        for (run, label), g in table.groupby(["run", "label"]):
            ax.plot(g["step"], g[key], "o-", ms=3, lw=1, color=COLOURS[label], alpha=0.8)
        ax.set_title(key, fontsize=9)
        ax.set_ylim(-0.02, 1.02)
        ax.set_xlim(0, 31_000)
    for ax in axes[-1]:
        ax.set_xlabel("step")
    _legend(axes[0, 0], [k for k in COLOURS if k in set(table["label"])])
    fig.suptitle("circuit measures per checkpoint: stalled vs routed runs (compose_lens circuit_measures)", fontsize=10)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def plot_trajectories(curves, labels, path: Path) -> None:
    plt = _plt()
    fig, axes = plt.subplots(1, 2, figsize=(10, 3.6), sharey=True)
    for ax, col in zip(axes, ("1var_train", "routing_accuracy")):
        for name, c in curves.items():
            if labels[name] in COLOURS:
                c = c[c["step"] <= 12_000]
                ax.plot(c["step"], c[col], lw=1, color=COLOURS[labels[name]], alpha=0.75)
        ax.axhline(THRESHOLD, ls=":", color="grey", lw=1)
        ax.axhline(0.9, ls="--", color="grey", lw=1)
        ax.set_title(col, fontsize=9)
        ax.set_xlabel("step")
    _legend(axes[0], ["stalled", "routed"])
    fig.suptitle("logged 1-var accuracies at the study's setting, coloured by outcome "
                 "(dotted: the 0.7 predictor; dashed: the 0.9 routing rule)", fontsize=9)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def plot_gradients(table: pd.DataFrame, path: Path) -> None:
    """Gradient norm (top) and half-batch cosine (bottom) of the four attention groups on the
    1-var rows of each checkpoint's training batch, against the step."""
    plt = _plt()
    groups = [g for g, _ in GROUPS][:4]
    fig, axes = plt.subplots(2, 4, figsize=(11, 5.2), sharex=True)
    sub = table[table["subset"] == "1var"]
    for row, col in enumerate(("grad_norm", "half_cosine")):
        for ax, group in zip(axes[row], groups):
            for (run, label), g in sub[sub["group"] == group].groupby(["run", "label"]):
                ax.plot(g["step"], g[col], "o-", ms=3, lw=1, color=COLOURS[label], alpha=0.8)
            ax.set_title(f"{group}: {col}", fontsize=8)
            ax.set_xlim(0, 31_000)
            if col == "grad_norm":
                ax.set_yscale("log")
            else:
                ax.axhline(0, color="grey", lw=0.5)
    for ax in axes[-1]:
        ax.set_xlabel("step")
    _legend(axes[0, 0], [k for k in COLOURS if k in set(sub["label"])])
    fig.suptitle("training-loss gradient on the 1-var rows of each checkpoint's batch of 512", fontsize=9)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=OUT)
    parser.add_argument("--figures", type=Path, default=FIGURES)
    args = parser.parse_args(argv)
    torch.set_num_threads(1)
    args.out.mkdir(parents=True, exist_ok=True)
    args.figures.mkdir(parents=True, exist_ok=True)

    curves, labels, finished = metric_curves()
    for name in curves:
        last = int(curves[name]["step"].max())
        print(f"  {name}: {labels[name]}{'' if finished[name] else f' (unfinished, step {last})'}")
    sep = pd.concat([separation(curves, labels, col) for col in ("1var_train", "routing_accuracy")])
    sep.to_csv(args.out / "mechanism_separation.csv", index=False, float_format="%.6g")
    for col, t in sep.groupby("measure"):
        print(f"{col}: separable from step {earliest_separating_step(t)} on")
    plot_trajectories(curves, labels, args.figures / "stalls_trajectories.png")

    measures, grads = measure_and_gradients(checkpoint_sources(labels))
    measures.to_csv(args.out / "mechanism_measures.csv", index=False, float_format="%.6g")
    grads.to_csv(args.out / "mechanism_gradients.csv", index=False, float_format="%.6g")
    plot_measures(measures, args.figures / "stalls_measures.png")
    plot_gradients(grads, args.figures / "stalls_gradients.png")
    print(f"wrote {args.out}/mechanism_{{measures,gradients,separation}}.csv and {args.figures}/stalls_*.png")


if __name__ == "__main__":
    main()
