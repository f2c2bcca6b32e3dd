"""The theory's idealised transformer beside the real one, at the study's setting or a small-modulus proxy
(docs/idealised.md).

    python experiments/idealised.py train --out runs/idealised          # the proxy's runs (resumable)
    python experiments/idealised.py compare --out runs/idealised \\
        --results experiments/results/idealised                          # the CSV, tables and figures
    python experiments/idealised.py train --out runs/idealised_study --scale study
    python experiments/idealised.py compare --out runs/idealised_study --scale study \\
        --results experiments/results/idealised/study                    # p = 59, three seeds

**The study's setting** (``--scale study``): p = 59 and the study's model and recipe in fp32,
up to 30,000 steps, stopped once decided (``stop_at=decided``); ``both`` at d_model 360.

**The proxy.** The study's setting (p = 59, 30,000 steps) costs minutes per run on a free
core; this machine shares two cores with many jobs, so the comparison runs at p = 17 (12
variables, the study's f, r and sequence length), ``--steps`` steps (default 3,000),
bf16 autocast, one thread. Every variant has d_model = 192 (d_head 128, d_mlp 512),
the least width at which the disentangled residual's four equal blocks (embeddings,
layer-1 attention, layer-2 attention, layer-2 MLP) hold one-hot orthogonal embeddings of
the 32 tokens and 16 positions; so "paper" here is the paper's architecture and recipe at
that width, not the shipped model.

**The variants.** ``paper`` (learned embeddings, additive residual), ``orthogonal``
(frozen one-hot embeddings), ``disentangled`` (one residual block per writer), ``both``;
seeds set ``task.seed``, ``train.seed`` and ``model.init_seed`` together, as the sweeps do.
The overlap knob: ``orthogonal`` with ``embedding_overlap`` in ``--overlaps``, one seed.

**What ``compare`` writes** (into ``--results``): ``comparison.csv``, one row per run
(final pool accuracies, the exhaustive accuracies, the phase onsets of
:func:`compose_lens.training.phases.logged_phases`, the stall detector's outcome
(:func:`compose_lens.training.outcome.classify_run`), the located binder / router / adder
(:func:`compose_lens.analysis.locate.locate`), the previous-token and routing probes, the
MLP's key frequencies); ``gradient_shares.csv``, the share of the associative-memory term
in the gradients of layer-1 QK / OV and layer-2 QK at every checkpoint
(:mod:`compose_lens.registry.gradient.terms`); ``gradient_shares.png`` (share over
training per variant) and ``gradient_shares_overlap.png`` (share against the overlap knob).
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

VARIANTS = {
    "paper": [],
    "orthogonal": ["model.embeddings=orthogonal"],
    "disentangled": ["model.residual=disentangled"],
    "both": ["model.embeddings=orthogonal", "model.residual=disentangled"],
}
PROXY = ["task.modulus=17", "model.d_model=192", "model.d_head=128", "precision=bf16", "threads=1"]
# the study's task, model and recipe (fp32), stopped once decided; "both" needs the width that holds
# one-hot embeddings of the 74 tokens and 16 positions in each of the four residual blocks
STUDY = ["threads=1", "stop_at=decided", "checkpoint_every=1000"]
STUDY_WIDTH = {"both": ["model.d_model=360"]}


def _seeds(seed: int) -> list[str]:
    return [f"task.seed={seed}", f"train.seed={seed}", f"model.init_seed={seed}"]


def _common(steps: int, seed: int) -> list[str]:
    return PROXY + [f"steps={steps}", "eval_every=100", f"checkpoint_every={max(steps // 12, 100)}",
                    "pool_size=500"] + _seeds(seed)


def run_plan(args: argparse.Namespace) -> list[tuple[str, list[str]]]:
    """(run name, overrides) of the runs ``args.only`` names: the variants seed-major (whatever
    finishes first covers every variant), or the overlap knob's runs (``--overlap-steps`` each)."""
    if args.only == "overlaps":
        seed = args.seeds[0]
        base = (STUDY + _seeds(seed) + [f"steps={args.overlap_steps}", "checkpoint_every=250"] if args.scale == "study"
                else _common(args.overlap_steps, seed))
        return [(f"overlap{c:g}-s{seed}", base + ["model.embeddings=orthogonal", f"model.embedding_overlap={c}"])
                for c in args.overlaps]
    if args.scale == "study":
        return [(f"{name}-s{seed}", STUDY + _seeds(seed) + changes + STUDY_WIDTH.get(name, []))
                for seed in args.seeds for name, changes in VARIANTS.items()]
    return [(f"{name}-s{seed}", _common(args.steps, seed) + changes)
            for seed in args.seeds for name, changes in VARIANTS.items()]


def train(args: argparse.Namespace) -> None:
    from compose_lens.core.config import RunConfig
    from compose_lens.training.train import Trainer

    plan = run_plan(args)[args.worker::args.workers]
    for name, overrides in plan:
        run_dir = args.out / name
        if (run_dir / "results.json").exists():
            continue
        config = RunConfig().with_overrides(overrides)
        print(f"training {name}: {' '.join(overrides)}", flush=True)
        Trainer(config, run_dir, resume=run_dir.exists(), progress=False).run()


POOLS = ("0var_train", "0var_add_restricted", "1var_train", "1var_add_restricted", "1var_var_restricted",
         "2var_train", "2var_add_restricted", "2var_var_restricted_1", "2var_var_restricted_2")
SUMMARY_KEYS = ("prev_token_attention_score", "prev_token_probe_accuracy", "equals_to_operands_score",
                "equals_to_values_score", "variable_identity_score", "key_frequency_strength",
                "ov_mlp_addition_accuracy", "grid_loss")

SAME_MLP_N = 150  # prompts a same-MLP condition (the modularity grid's)
CIRCUIT_KEYS = ("modularity_separation", "modularity_binding_component", "modularity_adding_component",
                "modularity_circuit_edges", "modularity_graph_edges", "modularity_circuit_fraction",
                "modularity_verdict", "modularity_reason")


def run_identity(run_dir: Path) -> dict:
    """variant, seed and overlap from a run's name (``both-s0``, ``overlap0.25-s0``)."""
    name, seed = run_dir.name.rsplit("-s", 1)
    overlap = float(name.removeprefix("overlap")) if name.startswith("overlap") else None
    return {"run": run_dir.name, "variant": "overlap" if overlap is not None else name, "seed": int(seed),
            "overlap": overlap}


def describe_run(run_dir: Path) -> dict:
    """One row of the comparison: accuracies, phases, outcome, located roles, probes, key frequencies."""
    from compose_lens.training import runs
    from compose_lens.analysis import locate
    from compose_lens.registry.same_mlp import comparisons as same_mlp
    from compose_lens.registry.modularity import measures as modularity
    from compose_lens.registry.gradient import terms as gradient_terms
    from compose_lens.registry.probes import summary
    from compose_lens.training.outcome import classify_run
    from compose_lens.training.phases import logged_phases
    from compose_lens.training.subject import for_analyses, load_model

    row = run_identity(run_dir)
    metrics = runs.read_metrics(run_dir)
    results = json.loads((run_dir / "results.json").read_text())
    row.update({"steps": results.get("steps"), **{f"final_{k}": metrics[-1].get(k) for k in POOLS}})
    for name, value in results["exhaustive"].items():
        row[f"exhaustive_{name}"] = value["accuracy"]
    for name, phase in logged_phases(metrics).items():
        row[f"onset_{name}"] = phase["step"]
    found = classify_run(run_dir)
    row.update({"outcome": found["outcome"], "outcome_why": found["why"]})
    loaded = load_model(run_dir)
    subject = for_analyses(loaded)
    where = locate.locate(subject)
    for role in where.roles():
        row[f"{role.role}"] = role.component or "none"
        row[f"{role.role}_score"] = role.score
    found = summary.circuit_summary(subject)
    row.update({k: found[k] for k in SUMMARY_KEYS})
    row["key_frequencies"] = " ".join(map(str, found["key_frequencies"]))
    row["same_dominant_frequency"] = found["constants_vs_variables"]["same_dominant_frequency"]
    same = same_mlp.same_mlp_report(subject, n=SAME_MLP_N)
    row.update({"same_mlp_verdict": same["verdict"], "same_mlp_reason": same["verdict_reason"]})
    # circuit discovery: separation of binding and addition, the smallest circuit (modularity.measure;
    # every score "inconclusive" with its reason until the model has learned the task)
    scores = modularity.measure(subject, n_pairs=120, same_mlp_n=SAME_MLP_N)
    row.update({k: scores[k] for k in CIRCUIT_KEYS})
    row["token_mean_cosine"] = gradient_terms.idealisation(subject.model, loaded.config.model)["token_mean_cosine"]
    return row


def compare(args: argparse.Namespace) -> None:
    import pandas as pd
    from tqdm.auto import tqdm

    from compose_lens.registry.gradient import terms as gradient_terms

    done = sorted(d for d in args.out.glob("*-s*") if (d / "results.json").exists())
    rows, shares = [], []
    for run_dir in tqdm(done[args.worker::args.workers], desc="runs"):  # kept beside each run
        row_file, shares_file = run_dir / "idealised_row.json", run_dir / "idealised_gradient_shares.csv"
        if not run_dir.name.startswith("overlap") and not row_file.exists():
            row_file.write_text(json.dumps(describe_run(run_dir)))
        if not shares_file.exists():
            gradient_terms.shares_over_training(run_dir).assign(**run_identity(run_dir)).to_csv(shares_file,
                                                                                              index=False)
    if args.workers > 1:
        return  # the last call, with one worker, collects
    for run_dir in done:
        if (run_dir / "idealised_row.json").exists():
            rows.append(json.loads((run_dir / "idealised_row.json").read_text()))
        shares.append(pd.read_csv(run_dir / "idealised_gradient_shares.csv"))
    args.results.mkdir(parents=True, exist_ok=True)
    pd.DataFrame(rows).to_csv(args.results / "comparison.csv", index=False)
    shares = pd.concat(shares, ignore_index=True)
    shares.to_csv(args.results / "gradient_shares.csv", index=False)
    (args.results / "comparison.md").write_text(summary_tables(pd.DataFrame(rows), shares))
    plot_shares(shares, args.results, "p = 59, the study's setting" if args.scale == "study" else "p = 17 proxy")


def summary_tables(rows, shares) -> str:
    """The comparison and the kept term's mean cosine per run as Markdown tables (docs/idealised.md
    quotes them): one row per run, variants in :data:`VARIANTS` order, seeds within."""
    order = {v: k for k, v in enumerate([*VARIANTS, "overlap"])}
    rows = rows.assign(_o=rows["variant"].map(order)).sort_values(["_o", "seed"])

    def number(value):  # separation is a number or "inconclusive" in one column
        try:
            return float(value)
        except (TypeError, ValueError):
            return value

    def cell(key: str, value) -> str:
        if value is None or (isinstance(value, float) and value != value):  # a phase not reached
            return "-"
        if isinstance(value, str) or isinstance(value, bool):
            return str(value)
        return f"{value:,.0f}" if key == "steps" or key.startswith("onset_") else f"{value:.3f}"

    head = ["run", "outcome", "steps", "0-var held-out", "2-var union", "addition", "assignment", "refinement",
            "router", "prev-token attention", "identity QK", "= -> values", "same MLP", "separation", "modularity"]
    keys = ["run", "outcome", "steps", "exhaustive_zero_var_heldout", "exhaustive_two_var_union", "onset_addition",
            "onset_assignment", "onset_refinement", "router", "prev_token_attention_score",
            "variable_identity_score", "equals_to_values_score", "same_mlp_verdict", "modularity_separation",
            "modularity_verdict"]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for _, r in rows.iterrows():
        values = [number(r.get(k)) for k in keys]
        lines.append("| " + " | ".join(cell(k, v) for k, v in zip(keys, values)) + " |")
    kept = shares[(shares["term"] == "kept") & (shares["step"] > 0)]
    mean = kept.groupby(["run", "matrix"])["cosine"].mean().unstack()
    lines += ["", "| run | layer-1 QK | layer-1 OV | layer-2 QK |", "|---|---|---|---|"]
    ordered = sorted(mean.index, key=lambda run: (order.get(run_identity(Path(run))["variant"], 99),
                                                  run_identity(Path(run))["overlap"] or 0, run))
    lines += [f"| {run} | {mean.loc[run, 'qk0']:.3f} | {mean.loc[run, 'ov0']:.3f} | {mean.loc[run, 'qk1']:.3f} |"
              for run in ordered]
    return "\n".join(lines) + "\n"


def plot_shares(shares, out: Path, setting: str = "p = 17 proxy") -> None:
    """The kept term's cosine with the full gradient over training (one colour per variant, mean
    over seeds, seeds faint: :func:`compose_lens.registry.gradient.figure.gradient_shares_figure`), and against the overlap knob."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from compose_lens.registry.gradient.figure import GRADIENT_TITLES, gradient_shares_figure

    kept = shares[shares["term"] == "kept"]
    variants = kept[kept["variant"].isin(VARIANTS)]
    if not variants.empty:
        fig, _ = gradient_shares_figure(variants, by="variant", title="The associative-memory term's share "
                                              f"of the gradient over training ({setting})")
        fig.savefig(out / "gradient_shares.png", dpi=130)
        plt.close(fig)

    knob = kept[kept["variant"] == "overlap"]
    if knob.empty:
        return
    fig, axes = plt.subplots(1, 3, figsize=(15, 4.2), sharey=True)
    steps = sorted(set(knob["step"]))
    marks = [steps[0], steps[len(steps) // 2], steps[-1]]
    for ax, matrix in zip(axes, ("qk0", "ov0", "qk1")):
        for k, step in enumerate(marks):
            part = knob[(knob["matrix"] == matrix) & (knob["step"] == step)].sort_values("overlap")
            ax.plot(part["overlap"], part["cosine"], "o-", color=f"C{k}", label=f"step {step}")
        ax.set(title=GRADIENT_TITLES[matrix], xlabel="embedding_overlap (cosine between token embeddings)")
        ax.axhline(0, color="grey", lw=0.5)
    axes[0].set_ylabel("cosine(kept term, full gradient)")
    axes[0].legend(fontsize=8)
    fig.suptitle(f"From the idealisation (overlap 0) towards correlated embeddings: frozen embeddings, {setting}")
    fig.tight_layout()
    fig.savefig(out / "gradient_shares_overlap.png", dpi=130)
    plt.close(fig)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="command", required=True)
    for command in ("train", "compare"):
        p = sub.add_parser(command)
        p.add_argument("--out", type=Path, required=True, help="directory of the runs")
        p.add_argument("--steps", type=int, default=3000, help="steps of each proxy run")
        p.add_argument("--scale", choices=("proxy", "study"), default="proxy",
                       help="proxy: p = 17 (above); study: p = 59, the study's model and recipe, 30,000 steps "
                            "at most, stopped once decided (stop_at=decided)")
        p.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
        p.add_argument("--overlaps", type=float, nargs="*", default=[0.0, 0.25, 0.5, 0.75])
        p.add_argument("--overlap-steps", type=int, default=1000, help="steps of each overlap run")
    sub.choices["train"].add_argument("--only", choices=("variants", "overlaps"), default="variants")
    for command in ("train", "compare"):
        sub.choices[command].add_argument("--worker", type=int, default=0, help="this worker's index")
        sub.choices[command].add_argument("--workers", type=int, default=1, help="how many workers share the runs")
    sub.choices["compare"].add_argument("--results", type=Path, required=True, help="where the CSV and PNGs go")
    args = parser.parse_args(argv)
    if args.command == "train":
        train(args)
    else:
        compare(args)
    return 0


if __name__ == "__main__":
    sys.exit(main())
