"""The ``ablation`` analysis: the accuracy each pool loses when a head, an MLP, its neurons or its Fourier
directions are ablated. :mod:`.ablations` holds the numbers (the same-MLP tests use them too), :mod:`.figure`
the figure.
"""

from __future__ import annotations

from compose_lens.registry.analysis import Analysis, Option, Result


def _ablation(ctx: Context, settings: dict) -> Result:
    from compose_lens.registry.ablation.ablations import ablation_table

    table = ablation_table(ctx.loaded, seed=ctx.seed, **settings)
    subject = table.attrs.get("neuron_subject")
    return Result(tables={"ablation": table}, provenance={"neuron_subject": subject}, value=subject)


def _ablation_figures(ctx: Context, result: Result, settings: dict) -> list:
    """One figure, the command's file and the report's image: the heads and the MLP by every kind of ablation,
    each key frequency's neurons and Fourier directions by resample ablation only (the rest is in the table)."""
    import pandas as pd

    from compose_lens.data.sampler import POOL_NAMES
    from compose_lens.registry.ablation.figure import ablation_figure

    table = result.tables["ablation"].copy()
    table["pool"] = pd.Categorical(table["pool"], categories=list(POOL_NAMES), ordered=True)
    frequencies = table["target"].isin(["frequency_neurons", "fourier_directions"])
    shown = table[~frequencies | (table["kind"] == "resample")]
    return [("ablation", ablation_figure, (shown, settings["pool_size"]), 120)]


def _ablation_lines(result: Result) -> list[str]:
    table = result.tables["ablation"]
    shown = table[table["target"] != "neuron"]
    top = shown.loc[shown["accuracy_drop"].nlargest(3).index]
    note = [f"  neurons and Fourier directions: {result.value['note']}"] if result.value else []
    return [f"  {len(table)} rows; the largest drops:",
            *(f"    {r.target} (blocks.{r.block}, {r.kind} ablation) on {r.pool}: accuracy {r.baseline_accuracy:.3f} "
              f"-> {r.accuracy:.3f}" for r in top.itertuples()), *note]


def _ablation_memory(settings: dict, config) -> None:
    """Nine pools of ``pool_size`` (joined once more into one batch); kept per sequence: MLP2's activations
    at ``=`` and the direct path, an ablation's logits, and the activations read for the replacement."""
    from compose_lens.data.safety import check_sizes, kept_activation_bytes

    m, n = config.model, settings["pool_size"]
    kept = 4 * (2 * m.d_mlp + 3 * m.d_vocab_out) + 8 * config.task.seq_len + kept_activation_bytes(config)
    check_sizes(config, {f"--pool-size {n}": (n, 9)}, kept)


def _ablation_section(inp, result: Result, settings: dict) -> str:
    return inp.report.figure(result.figure("ablation"), "ablation",
                             f"Accuracy lost on each pool ({settings['pool_size']} sequences each) when a component "
                             "is ablated: the heads and the MLP by zero, mean and resample ablation, each key "
                             "frequency's neurons and Fourier directions by resample ablation (the other kinds and "
                             "single neurons are in <code>ablation.csv</code>). A drop counts only beyond its own "
                             "noise, its 95 % interval excluding 0 (the two accuracies' Newcombe interval); "
                             "ablations with no such drop are left out (the title counts them), and a drawn cell "
                             "within its noise is hatched.")


ABLATION = Analysis(name="ablation", title="Ablation: accuracy lost per pool", compute=_ablation,
                    settings={"pool_size": 500}, module="compose_lens.registry.ablation.ablations",
                    tables=("ablation",), causal=True, figures=("ablation",), draw=_ablation_figures,
                    section=_ablation_section,
                    command="ablate", help="zero/mean/resample ablation, accuracy on the nine pools",
                    options=(Option("--pool-size", "pool_size", "sequences per pool"),), guard=_ablation_memory,
                    describe=_ablation_lines, exports=("ablation_table",))
