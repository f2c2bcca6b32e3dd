"""The ``probes`` analysis: the circuit summary's measures (previous-token attention, QK routing, the Fourier
numbers; :mod:`.summary`, whose ``circuit_measures`` the dynamics also read) and the report's circuit-summary
section.
"""

from __future__ import annotations

from compose_lens.registry.analysis import Analysis, Finding, Result


def _probes(ctx: Context, settings: dict) -> Result:
    import pandas as pd

    from compose_lens.registry.probes.summary import circuit_summary

    summary = circuit_summary(ctx.loaded, seed=ctx.seed, fourier_subject=ctx.plan[1], heads=ctx.heads)
    by_type = pd.DataFrame([{"type": k, **v} for k, v in summary["scores_by_type"].items()])
    record = ctx.record()  # the summary's own record: its file keeps one under "provenance", as every file does
    kept = {k: v for k, v in summary.items() if k not in record}
    return Result(tables={"scores_by_type": by_type}, documents={"circuit_summary": kept}, facts=kept)


def _probes_section(inp, result: Result, settings: dict) -> str:
    """The summary in words: each number with what it measures, counts as whole numbers, the JSON key kept
    for the files."""
    import html
    import json

    from compose_lens.core.markup import html_table
    from compose_lens.registry.probes.summary import DETAIL_WORDS, MEASURE_WORDS, TYPE_WORDS

    summary = result.documents["circuit_summary"]
    words = {**MEASURE_WORDS, **DETAIL_WORDS}
    numbers = [[words.get(k, k.replace("_", " ")), int(v) if k.startswith("n_") else float(v), k]
               for k, v in summary.items() if isinstance(v, (int, float)) and not isinstance(v, bool) and k != "seed"]
    parts = [html_table(numbers, ["measure (final model)", "value", "key in circuit_summary.json"])]
    if summary.get("key_frequencies") is not None:
        parts.append(f"<p>Key frequencies of MLP2: <b>{html.escape(str(summary['key_frequencies']))}</b></p>")
    best = summary.get("best_neurons") or []
    if best:
        parts.append("<h3>Best neuron per key frequency</h3>"
                     "<p class=\"note\">Its ideal is the ReLU of the frequency-k part of its own pre-activation. "
                     "The fitted <code>cos k(x + y)</code> correlation and phase are in best_neurons.csv: a ReLU "
                     "neuron keeps its single-operand terms too, so that fit stays well below 1 for a clean "
                     "neuron.</p>"
                     + html_table([[int(row["frequency"]), int(row["neuron"]), float(row["fraction_explained"]),
                                    float(row["ideal_neuron_correlation"])] for row in best],
                                  ["key frequency k", "neuron", "share of its variance at k",
                                   "correlation with its ideal"]))
    by_type = summary.get("scores_by_type") or {}
    if by_type:
        scores = sorted({k for v in by_type.values() for k in v} - {"n"})
        parts.append("<h3>Attention scores by sequence type</h3>"
                     + html_table([[TYPE_WORDS.get(kind, kind), int(by_type[kind].get("n", 0))]
                                   + [by_type[kind].get(sc, "") for sc in scores] for kind in by_type],
                                  ["sequence type", "sequences", *(MEASURE_WORDS.get(sc, sc) for sc in scores)]))
    rest = {k: v for k, v in summary.items() if k in ("constants_vs_variables", "prev_token_probe")}
    if rest:
        parts.append("<details><summary>constants vs variables, probe details (JSON)</summary><pre>"
                     + html.escape(json.dumps(rest, indent=1)) + "</pre></details>")
    return "\n".join(parts)


PROBES = Analysis(
    name="probes", title="Circuit summary", compute=_probes, module="compose_lens.registry.probes.summary",
    tables=("scores_by_type",), documents=("circuit_summary",),
    section=_probes_section, anchor="circuit",
    findings=(Finding("prev_token_attention_score", "{binder}: each value attends to its variable", "near 1 (>= 0.9)", 0.9),
              Finding("prev_token_probe_accuracy", "{binder} writes the variable into the value's stream", "near 1 (>= 0.9)", 0.9),
              Finding("equals_to_operands_score", "{gatherer}: = attends to the operands", "high (>= 0.5)", 0.5),
              Finding("variable_identity_score", "{router} QK: = finds the value of its variable", "high (>= 0.5)", 0.5),
              Finding("equals_to_values_score", "{router}: = attends to the queried values", "high (>= 0.5)", 0.5,
                      by_construction="equals_to_values_by_construction"),
              Finding("ov_mlp_addition_accuracy", "{router} OV -> {adder} adds the routed values", "near 1 (>= 0.9)", 0.9),
              Finding("key_frequency_strength", "{adder} post-ReLU variance in its key frequencies", "high (>= 0.5)", 0.5)),
    exports=("circuit_summary", "circuit_measures", "prev_token_attention_score=compose_lens.analysis.probes",
             "variable_identity_score=compose_lens.analysis.probes"))
