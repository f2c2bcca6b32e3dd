"""The ``fourier`` analysis: the adder MLP's Fourier features (key frequencies, neuron fits, the readout and
the embedding). :mod:`.features` holds the numbers only it reads; the shared Fourier measures are
:mod:`compose_lens.analysis.fourier`'s.
"""

from __future__ import annotations

from compose_lens.registry.analysis import Analysis, Result


def _fourier(ctx: Context, settings: dict) -> Result:
    import pandas as pd
    import torch

    from compose_lens.analysis import fourier
    from compose_lens.analysis.activations import torch_threads
    from compose_lens.core.files import json_safe
    from compose_lens.registry.fourier.features import embedding_fourier

    model, config, seed = ctx.model, ctx.config, ctx.seed
    location, subject = ctx.plan
    layer = subject.layer
    # the OV test reads the router's head where it sits in the adder's block, else head 0
    ov_head = location.router.head if location.router.layer == layer else 0
    with torch_threads(1), torch.no_grad():
        grid = fourier.operand_grid(ctx.loaded, "constant", seed, layer=layer)
        variable = fourier.operand_grid(ctx.loaded, "both", seed, layer=layer)
        neurons = fourier.neuron_frequencies(grid)
        keys = fourier.key_frequencies(neurons)
        best = fourier.best_neurons(grid, keys)
        readout = fourier.unembed_fourier(grid)
        excluded = fourier.excluded_loss(grid, keys)
        facts = {
            "fourier_subject": subject.to_dict(),
            "mlp_block": layer,
            "ov_head": ov_head,
            "key_frequencies": keys,
            "key_frequency_shares": {int(k): float(v) for k, v in fourier.frequency_shares(neurons).items()},
            "key_frequency_strength": fourier.key_frequency_strength(grid, keys),
            "grid_loss": fourier.grid_loss(grid),
            "restricted_loss": fourier.restricted_loss(grid, keys),
            "restricted_loss_logits": fourier.restricted_loss(grid, keys, on="logits"),
            "excluded_loss_all": fourier.excluded_loss_all(grid, keys) if keys else fourier.grid_loss(grid),
            "ov_mlp_addition_accuracy": fourier.ov_mlp_addition_accuracy(model, config, layer=layer, head=ov_head),
            "constant_grid_accuracy": grid.accuracy(),
        }
        comparison = fourier.compare_grids(grid, variable)
        embedding, facts["embedding_fourier"] = embedding_fourier(model, config, keys)
    tables = {"neuron_frequencies": neurons, "best_neurons": best, "readout_fourier": readout,
              "excluded_loss": pd.DataFrame({"frequency": list(excluded), "excluded_loss": list(excluded.values())}),
              "embedding_fourier": embedding}
    return Result(tables=tables,
                  documents={"locate": json_safe(location.to_dict()), "key_frequencies": facts,
                             "constants_vs_variables": comparison},
                  facts={"constants_vs_variables": comparison},
                  value={**facts, "constants_vs_variables": comparison, "located": location})


def _fourier_figures(ctx: Context, result: Result, settings: dict) -> list:
    """The readout's and the embedding's frequencies, of their tables; the MLP's variance by frequency and the
    best neurons' patterns need the MLP's activations over every (x, y), which no table keeps: they are read
    from the model (its constant-operand grid, which the open context built once for the compute)."""
    import torch

    from compose_lens.analysis import fourier
    from compose_lens.analysis.activations import torch_threads
    from compose_lens.registry.fourier.features import best_neuron_patterns, frequency_variance_shares
    from compose_lens.registry.fourier.figure import (best_neurons_figure, embedding_fourier_figure,
                                                      frequency_shares_figure, readout_fourier_figure)

    t, facts = result.tables, result.documents["key_frequencies"]
    keys = facts["key_frequencies"]
    with torch_threads(1), torch.no_grad():  # built as the compute builds it (in the open context: that one)
        grid = fourier.operand_grid(ctx.loaded, "constant", ctx.seed, layer=facts["mlp_block"])
    shares, norms = frequency_variance_shares(grid), fourier.unembed_frequency_norms(t["readout_fourier"])
    figures = [("frequency_shares", frequency_shares_figure, (shares, keys), 120),
               ("readout_fourier", readout_fourier_figure, (norms, keys), 120),
               ("embedding_fourier", embedding_fourier_figure, (t["embedding_fourier"], facts["embedding_fourier"]), 120)]
    if len(t["best_neurons"]):
        patterns = best_neuron_patterns(grid, t["best_neurons"])
        figures.append(("best_neurons", best_neurons_figure, (patterns,), 110))
    return figures


def _fourier_lines(result: Result) -> list[str]:
    facts = result.value
    emb = facts["embedding_fourier"]
    return [*(f"  {role.line()}" for role in facts["located"].roles()),
            f"  analysed blocks.{facts['mlp_block']}.mlp: {facts['fourier_subject']['note']}",
            f"  key frequencies {facts['key_frequencies']} (strength {facts['key_frequency_strength']:.3f})",
            f"  grid loss {facts['grid_loss']:.4g}, restricted {facts['restricted_loss']:.4g}, "
            f"all keys excluded {facts['excluded_loss_all']:.4g}",
            f"  embedding W_E frequencies {emb['top_frequencies']} (above uniform, {emb['top_share']:.3f} of its "
            f"norm²); {emb['key_share']:.3f} in the key frequencies (flat: {emb['key_share_if_uniform']:.3f})",
            f"  OV -> MLP addition accuracy {facts['ov_mlp_addition_accuracy']:.4f} "
            f"(blocks.{facts['mlp_block']} head {facts['ov_head']})"]


def _fourier_section(inp, result: Result, settings: dict) -> str:
    import html

    from compose_lens.registry.fourier.features import fourier_neuron
    from compose_lens.registry.fourier.figure import fourier_neuron_figure

    facts = result.documents["key_frequencies"]
    if not facts["key_frequencies"]:
        return (f"<p>Analysed: blocks.{facts['mlp_block']}.mlp. No key frequency yet: no neuron is explained by "
                f"one frequency, so there is no Fourier neuron to draw.</p>")
    chosen = fourier_neuron(inp.subject)
    return (f"<p>Analysed: blocks.{facts['mlp_block']}.mlp ({html.escape(facts['fourier_subject']['note'])}). "
            f"Key frequencies {facts['key_frequencies']}, holding {facts['key_frequency_strength']:.3f} of its "
            f"post-ReLU variance over the constant-operand grid; <code>compose-lens fourier</code> writes every "
            f"table and figure.</p>"
            + inp.report.figure(fourier_neuron_figure(chosen), "fourier_neuron",
                                "The MLP neuron best explained by a key frequency, over all (x, y) of "
                                "constant-operand sequences, beside its fitted ideal pattern."))


FOURIER = Analysis(
    name="fourier", title="The MLP adds: Fourier analysis of the adder", compute=_fourier,
    figures=("frequency_shares", "readout_fourier", "embedding_fourier", "best_neurons", "fourier_neuron"),
    draw=_fourier_figures, section=_fourier_section,
    module="compose_lens.analysis.fourier",
    tables=("neuron_frequencies", "best_neurons", "readout_fourier", "excluded_loss", "embedding_fourier"),
    documents=("locate", "key_frequencies", "constants_vs_variables"),
    command="fourier", help="Fourier analysis of the adder MLP (located; the paper's MLP2): key frequencies and losses",
    describe=_fourier_lines,
    exports=("operand_grid", "key_frequencies", "key_frequency_strength", "best_neurons",
             "fourier_neuron=compose_lens.registry.fourier.features",
             "fourier_neuron_figure=compose_lens.registry.fourier.figure"))
