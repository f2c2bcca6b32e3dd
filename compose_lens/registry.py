"""The analysis registry: one declaration per analysis, read by ``analyze``, the report, the CLI and the API.

An analysis of one model is declared once, as an :class:`Analysis` here (:data:`ANALYSES`, in
the order ``analyze`` runs them):

* its **name** (``analyze`` writes its files into ``OUT/<name>/``, the report reads and keeps them in
  ``RUN_DIR/results/<name>/``) and the **title** of its report section;
* its **settings** with their defaults, in this one place: ``analyze``, the report and its own command
  run it with the same ones, and every file it writes records them (``settings`` in the provenance);
* its **computation**, ``compute(context, settings) -> Result``, over a per-model
  :class:`~compose_lens.report.context.Context`: what several analyses of one model share (the
  loaded model on the forwards the analyses use, the located circuit, the Fourier subject, the
  probe heads, the constant-operand grid) is made there once per model;
* the **tables** and **documents** its :class:`Result` holds (written as ``<stem>.csv`` with a
  ``<stem>.provenance.json`` beside it, and ``<stem>.json``), from which
  :func:`~compose_lens.report.context.read` rebuilds it, and its **figures**, drawn by
  :mod:`compose_lens.plots` (by a worker, where ``analyze`` has one);
* optionally: whether it **applies** to a model (``applies(config)``; ``analyze`` and the report
  leave it out where it does not: the variant reading on the study's task), its report **section** (``section(inputs, result, settings) -> HTML``, placed after the
  section ``report_after`` names), the **findings** ``analyze`` prints (summary key, what it measures,
  what the circuit predicts), its own **command** (``compose-lens <command> MODEL --out DIR``, with
  the ``options`` that set its settings and a memory ``guard``), and the **exports** of its module
  that are public API (``compose_lens.<name>``).

Nothing else names an analysis: :func:`compose_lens.report.outputs.write_analysis` loops over the
registry, the report makes each registered section with :func:`~compose_lens.report.context.obtain`
(the saved files where they were made with the same settings, seed and configuration, else computed
now and saved), the command
line builds the findings table and the registered commands from it, and ``compose_lens`` resolves the
exports. ``docs/extending.md`` walks through adding one (direct logit attribution, ``dla``).

**This module is imported by the command line before torch** (it builds the parser's registered
commands and the findings table from it): the declarations are plain data, and the functions
they name import the analysis modules, pandas and the figures inside their bodies
(``tests/unit/test_layout.py``, ``LAZY_ALLOWED``). It is the only module of the report and command
layers that imports the analysis modules it presents.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Callable

from compose_lens.errors import ComposeLensError

if TYPE_CHECKING:  # annotations only: the command line reads this module before torch
    import pandas as pd

# ``ctx: Context`` below is a compose_lens.report.context.Context (not imported: that module reads this one)

FIGURES = "figures"  # the folder of an analysis's figures, beside its tables


@dataclass(frozen=True)
class Finding:
    """One row of the table ``analyze`` prints: a summary key, what it measures, what the circuit predicts."""

    key: str
    what: str
    predicts: str


@dataclass(frozen=True)
class Option:
    """An option of an analysis's own command: ``--flag VALUE`` sets the integer setting ``setting``."""

    flag: str
    setting: str
    help: str
    minimum: int = 1


@dataclass
class Result:
    """What one analysis of one model found, as the files it writes and the facts ``summary.json`` keeps.

    ``figures``: ``(stem, plots function, its arguments, dpi)``, drawn where the figures are drawn;
    ``drawn``: ``(stem, matplotlib figure, dpi)`` already drawn (where the figure makes the table).
    ``value``: anything else the analysis's command prints (not written)."""

    tables: dict[str, pd.DataFrame] = field(default_factory=dict)
    documents: dict[str, dict] = field(default_factory=dict)
    facts: dict = field(default_factory=dict)
    figures: list[tuple[str, Callable, tuple, int]] = field(default_factory=list)
    drawn: list[tuple[str, Any, int]] = field(default_factory=list)
    value: Any = None


@dataclass(frozen=True)
class Analysis:
    """One registered analysis (see the module docstring)."""

    name: str
    title: str
    compute: Callable[[Context, dict], Result]
    settings: dict = field(default_factory=dict)
    tables: tuple[str, ...] = ()
    documents: tuple[str, ...] = ()
    module: str | None = None  # the analysis module it presents (only the registry imports it)
    causal: bool = False  # left out by `analyze --skip-causal`
    section: Callable[[Any, Result, dict], str] | None = None
    anchor: str | None = None  # the section's anchor (default: the name)
    report_after: str | None = None  # the anchor of the section it follows (default: the last)
    findings: tuple[Finding, ...] = ()
    command: str | None = None
    help: str = ""
    options: tuple[Option, ...] = ()
    guard: Callable[[dict, Any], None] | None = None  # (settings, config) -> None or one-line refusal
    describe: Callable[[Result], list[str]] | None = None  # what its command prints
    exports: tuple[str, ...] = ()  # names of ``module`` that are public API
    applies: Callable[[Any], bool] | None = None  # (config) -> whether it reads this model (None: every model)

    def reads(self, config) -> bool:
        """Whether this analysis has anything to read in a model of ``config`` (:attr:`applies`)."""
        return self.applies is None or bool(self.applies(config))

    def with_settings(self, changes: dict | None = None) -> dict:
        """The default settings with ``changes``; an unknown setting is refused in one line."""
        unknown = set(changes or {}) - set(self.settings)
        if unknown:
            raise ComposeLensError(f"analysis {self.name}: no setting {sorted(unknown)} "
                                   f"(it has {sorted(self.settings)})")
        return {**self.settings, **(changes or {})}


def sections(registry: tuple[Analysis, ...], fixed: tuple[tuple[str, str, Callable], ...],
             make: Callable[[Analysis], Callable]) -> tuple[tuple[str, str, Callable], ...]:
    """The report's page: ``fixed`` (anchor, title, section) in order, and after each the registered
    sections whose ``report_after`` names it (``make(analysis)``: the section of the page); the
    registered ones without a known anchor at the end."""
    page = list(fixed)
    pending = [a for a in registry if a.section is not None]
    while pending:  # a section may follow another registered one: place what can be placed, again
        anchors = [a for a, _, _ in page]
        placeable = [a for a in pending if a.report_after in anchors] or pending[:1]
        for analysis in placeable:
            anchors = [a for a, _, _ in page]
            where = anchors.index(analysis.report_after) + 1 if analysis.report_after in anchors else len(page)
            page.insert(where, (analysis.anchor or analysis.name, analysis.title, make(analysis)))
            pending.remove(analysis)
    return tuple(page)


def by_name(registry: tuple[Analysis, ...], name: str) -> Analysis:
    for analysis in registry:
        if analysis.name == name:
            return analysis
    raise ComposeLensError(f"no analysis {name!r}; registered: {', '.join(a.name for a in registry)}")


# -- probes: the circuit summary ----------------------------------------------------------------


def _probes(ctx: Context, settings: dict) -> Result:
    import pandas as pd

    from compose_lens.analysis.summary import circuit_summary

    summary = circuit_summary(ctx.model, ctx.config, ctx.split, seed=ctx.seed, subject=ctx.plan[1], heads=ctx.heads)
    by_type = pd.DataFrame([{"type": k, **v} for k, v in summary["scores_by_type"].items()])
    kept = {k: v for k, v in summary.items() if k not in ("config", "code_version", "seed")}
    return Result(tables={"scores_by_type": by_type}, documents={"circuit_summary": kept}, facts=summary)


def _probes_section(inp, result: Result, settings: dict) -> str:
    import html
    import json

    from compose_lens.report.page import html_table

    summary = result.documents["circuit_summary"]
    numbers = [[k, float(v)] for k, v in summary.items()
               if isinstance(v, (int, float)) and k != "seed"]
    parts = [html_table(numbers, ["measure (final model)", "value"])]
    if summary.get("key_frequencies") is not None:
        parts.append(f"<p>Key frequencies of MLP2: <b>{html.escape(str(summary['key_frequencies']))}</b></p>")
    best = summary.get("best_neurons") or []
    if best:
        header = list(best[0])
        parts.append("<h3>Best neuron per key frequency</h3>"
                     + html_table([[row[h] for h in header] for row in best], header))
    by_type = summary.get("scores_by_type") or {}
    if by_type:
        scores = sorted({k for v in by_type.values() for k in v})
        parts.append("<h3>Attention scores by sequence type</h3>"
                     + html_table([[kind] + [by_type[kind].get(sc, "") for sc in scores] for kind in by_type],
                                  ["type", *scores]))
    rest = {k: v for k, v in summary.items() if k in ("constants_vs_variables", "prev_token_probe")}
    if rest:
        parts.append("<details><summary>constants vs variables, probe details (JSON)</summary><pre>"
                     + html.escape(json.dumps(rest, indent=1)) + "</pre></details>")
    return "\n".join(parts)


PROBES = Analysis(
    name="probes", title="Circuit summary", compute=_probes, module="compose_lens.analysis.summary",
    tables=("scores_by_type",), documents=("circuit_summary",),
    section=_probes_section, anchor="circuit", report_after="dynamics",
    findings=(Finding("prev_token_attention_score", "layer 1: each value attends to its variable", "near 1"),
              Finding("prev_token_probe_accuracy", "layer 1 writes the variable into the value's stream", "near 1"),
              Finding("equals_to_operands_score", "layer 1: = attends to the operands", "high"),
              Finding("variable_identity_score", "layer 2 QK: = finds the value of its variable", "high"),
              Finding("equals_to_values_score", "layer 2: = attends to the queried values", "high"),
              Finding("ov_mlp_addition_accuracy", "OV2 -> MLP2 adds the routed values", "near 1"),
              Finding("key_frequency_strength", "MLP2 post-ReLU variance in its key frequencies", "high")),
    exports=("circuit_summary", "circuit_measures"))


# -- qk: the two QK views (weights only, 0.1 s each) --------------------------------------------


def _qk(ctx: Context, settings: dict) -> Result:
    import compose_lens.plots as plots
    from compose_lens.analysis import figure_data

    positional, identity = figure_data.qk_matrices(ctx.model, ctx.config, ctx.heads)  # None: no head plays it
    drawn = {} if positional is None else {"positional_qk": plots.positional_qk_figure(positional)}
    if identity is not None:
        drawn["variable_identity"] = plots.variable_identity_figure(identity, ctx.config.task.variable_names)
    return Result(tables={name: table for name, (_, table) in drawn.items()},
                  drawn=[(name, fig, 120) for name, (fig, _) in drawn.items()])


QK = Analysis(name="qk", title="Previous-token head and variable-identity routing", compute=_qk,
              tables=("positional_qk", "variable_identity"))


# -- fourier: the adder MLP --------------------------------------------------------------------


def _fourier(ctx: Context, settings: dict) -> Result:
    import pandas as pd
    import torch

    import compose_lens.plots as plots
    from compose_lens.analysis import figure_data, fourier
    from compose_lens.analysis.activations import torch_threads
    from compose_lens.files import json_safe

    model, config, split, seed = ctx.model, ctx.config, ctx.split, ctx.seed
    location, subject = ctx.plan
    layer = subject.layer
    # the OV test reads the router's head where it sits in the adder's block, else head 0
    ov_head = location.router.head if location.router.layer == layer else 0
    with torch_threads(1), torch.no_grad():
        grid = fourier.operand_grid(model, config, split, "constant", seed, layer=layer)
        variable = fourier.operand_grid(model, config, split, "both", seed, layer=layer)
        neurons = fourier.neuron_frequencies(grid)
        keys = fourier.key_frequencies(neurons)
        best = fourier.best_neurons(grid, keys, neurons)
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
        embedding, facts["embedding_fourier"] = fourier.embedding_fourier(model, config, keys)
    tables = {"neuron_frequencies": neurons, "best_neurons": best, "readout_fourier": readout,
              "excluded_loss": pd.DataFrame({"frequency": list(excluded), "excluded_loss": list(excluded.values())}),
              "embedding_fourier": embedding}
    figures = [("frequency_shares", plots.frequency_shares_figure, (figure_data.frequency_variance_shares(grid), keys),
                120),
               ("readout_fourier", plots.readout_fourier_figure, (fourier.unembed_frequency_norms(readout), keys), 120),
               ("embedding_fourier", plots.embedding_fourier_figure, (embedding, facts["embedding_fourier"]), 120)]
    if len(best):
        figures.append(("best_neurons", plots.best_neurons_figure, (figure_data.best_neuron_patterns(grid, best),),
                        110))
    return Result(tables=tables,
                  documents={"locate": json_safe(location.to_dict()), "key_frequencies": facts,
                             "constants_vs_variables": comparison},
                  facts={"constants_vs_variables": comparison}, figures=figures,
                  value={**facts, "constants_vs_variables": comparison, "located": location})


FOURIER = Analysis(
    name="fourier", title="The MLP adds: Fourier analysis of the adder", compute=_fourier,
    module="compose_lens.analysis.fourier",
    tables=("neuron_frequencies", "best_neurons", "readout_fourier", "excluded_loss", "embedding_fourier"),
    documents=("locate", "key_frequencies", "constants_vs_variables"),
    exports=("operand_grid", "key_frequencies", "key_frequency_strength", "best_neurons"))


# -- same_mlp: one MLP for constants and variables? ---------------------------------------------


def _same_mlp(ctx: Context, settings: dict) -> Result:
    from compose_lens.analysis import same_mlp
    from compose_lens.files import json_safe

    report = dict(same_mlp.same_mlp_report(ctx.model, ctx.config, ctx.split, seed=ctx.seed, n=settings["n"]))
    trimmed = {k: v for k, v in report.items() if k not in ("tables", "config", "code_version", "seed")}
    # summary.json keeps the verdict; the tables belong to `compose-lens same-mlp` and to same_mlp.json here
    return Result(documents={"same_mlp": json_safe(report)}, facts={"same_mlp": json_safe(trimmed)})


def _same_mlp_section(inp, result: Result, settings: dict) -> str:
    """The causal tests that can fail (operand interchange, feature transfer, representation
    transfer) with their controls and verdict, then the correlational cosines."""
    import html

    import compose_lens.plots as plots
    from compose_lens.analysis import figure_data, same_mlp
    from compose_lens.report.page import html_table

    report = result.documents["same_mlp"]
    table = same_mlp.verdict_table(report)
    columns = [c for c in ("test", "status", "effect", "ci_low", "ci_high", "worst", "ceiling") if c in table]
    groups = figure_data.cosine_groups(inp.model, inp.config, inp.split)
    return (f"<p><b>Verdict:</b> {html.escape(str(report['verdict']))} (supported only if every test "
            f"passes; each test's rule and thresholds are in <code>compose-lens same-mlp</code>'s "
            f"same_mlp.json; {settings['n']} prompts per set)</p>"
            + html_table(table[columns].values.tolist(), columns)
            + (inp.report.figure(plots.same_mlp_figure(report), "same_mlp",
                                 "Operand interchange per condition (black tick: what the interchange would "
                                 "give if constants and variables did not share the MLP's representation; "
                                 "dotted: chance), constant against variable damage profiles, and the probe "
                                 "and subspace transfer, with the controls. Bars: 95 % intervals.")
               if report["tables"] else  # no role located: no test ran (issue #45: KeyError 'interchange')
               f'<p class="missing">No test ran, so there is no figure of them: '
               f'{html.escape(str(report["verdict_reason"]))}.</p>')
            + inp.report.figure(plots.cosine_histograms_figure(groups), "cosine_histograms",
                                "Correlational only: cosine similarity of the MLP2 input, constant "
                                "against variable operand, one panel per side of the variable; dashed: "
                                "each group's mean."))


SAME_MLP = Analysis(name="same_mlp", title="Same MLP for constants and variables", compute=_same_mlp,
                    settings={"n": 400}, module="compose_lens.analysis.same_mlp", documents=("same_mlp",),
                    section=_same_mlp_section, anchor="same-mlp", report_after="ablation",
                    exports=("same_mlp_report",))


# -- dla: direct logit attribution and the logit lens at = --------------------------------------


def _dla(ctx: Context, settings: dict) -> Result:
    import compose_lens.plots as plots
    from compose_lens.analysis import logit_attribution

    model, config, split = ctx.model, ctx.config, ctx.split
    table = logit_attribution.logit_attribution(model, config, split, settings["n"], ctx.seed)
    lens = logit_attribution.logit_lens(model, config, split, settings["n"], ctx.seed)
    return Result(tables={"logit_attribution": table, "logit_lens": lens},
                  figures=[("logit_attribution", plots.logit_attribution_figure, (table, lens), 120)])


def _dla_section(inp, result: Result, settings: dict) -> str:
    import compose_lens.plots as plots
    from compose_lens.report.page import html_table

    table, lens = result.tables["logit_attribution"], result.tables["logit_lens"]
    kinds = table.drop_duplicates("kind")
    largest = table.loc[table.groupby("kind")["share"].idxmax()].set_index("kind")["component"]
    rows = [[k.kind, float(k.margin), float(k.accuracy), int(k.n), largest[k.kind]] for k in kinds.itertuples()]
    return ("<p>The answer's margin at <code>=</code> (its logit minus the mean logit) is a sum of one term per "
            "component, since the model has no normalisation; each bar is a component's share of it (values "
            "of at least 0.05 printed). The logit lens reads the residual stream through the unembedding "
            f"after each stage ({settings['n']} sequences). <code>compose-lens dla</code> writes both tables.</p>"
            + html_table(rows, ["sequence kind", "mean margin (logits)", "accuracy", "sequences",
                                "largest direct share"])
            + inp.report.figure(plots.logit_attribution_figure(table, lens), "logit_attribution",
                                "Left: direct logit attribution per sequence kind; right: logit-lens accuracy "
                                "after each stage."))


def _dla_memory(settings: dict, config) -> None:
    from compose_lens.analysis import logit_attribution

    logit_attribution.check_memory(settings["n"], config)


def _dla_lines(result: Result) -> list[str]:
    table = result.tables["logit_attribution"]
    shared = table.dropna(subset=["share"])  # a kind whose mean margin is 0 has no shares (degenerate weights)
    top = shared.loc[shared.groupby("kind")["share"].idxmax()]
    return [f"  {row.kind}: {row.component} writes {row.share:.0%} of the answer margin "
            f"({row.contribution:.2f} of {row.margin:.2f})" for row in top.itertuples()] + [
        f"  {kind}: its mean answer margin is 0, so no component has a share of it"
        for kind in table["kind"].drop_duplicates() if kind not in set(shared["kind"])]


DLA = Analysis(
    name="dla", title="Direct logit attribution and logit lens at =", compute=_dla,
    settings={"n": 600}, module="compose_lens.analysis.logit_attribution",
    tables=("logit_attribution", "logit_lens"), section=_dla_section, report_after="fourier",
    command="dla", help="direct logit attribution and logit lens at '='",
    options=(Option("--n", "n", "sequences, drawn evenly from the nine pools", minimum=9),),
    guard=lambda settings, config: _dla_memory(settings, config),
    describe=_dla_lines, exports=("logit_attribution", "logit_lens"))


# -- ablation and patching: the causal tables ---------------------------------------------------


def _ablation(ctx: Context, settings: dict) -> Result:
    import compose_lens.plots as plots
    from compose_lens.analysis.ablation import ablation_table

    table = ablation_table(ctx.model, ctx.config, ctx.split, seed=ctx.seed, **settings)
    return Result(tables={"ablation": table}, figures=[("ablation", plots.ablation_figure, (table,), 120)])


def _ablation_section(inp, result: Result, settings: dict) -> str:
    import pandas as pd

    import compose_lens.plots as plots
    from compose_lens.data.sampler import POOL_NAMES

    table = result.tables["ablation"].copy()
    table["pool"] = pd.Categorical(table["pool"], categories=list(POOL_NAMES), ordered=True)
    frequencies = table["target"].isin(["frequency_neurons", "fourier_directions"])
    shown = table[(~frequencies | (table["kind"] == "resample")) & (table["target"] != "neuron")]
    return inp.report.figure(plots.ablation_figure(shown), "ablation",
                             f"Accuracy lost on each pool ({settings['pool_size']} sequences each) when a component "
                             "is ablated: the heads and the MLP by zero, mean and resample ablation, each key "
                             "frequency's neurons and Fourier directions by resample ablation (the other kinds and "
                             "single neurons are in <code>ablation.csv</code>). Ablations that change no pool's "
                             f"accuracy by more than {plots.ABLATION_MIN_DROP:g} are left out; the title counts them.")


ABLATION = Analysis(name="ablation", title="Ablation: accuracy lost per pool", compute=_ablation,
                    settings={"pool_size": 500}, module="compose_lens.analysis.ablation", tables=("ablation",),
                    causal=True, section=_ablation_section, report_after="patching", exports=("ablation_table",))


def _patching(ctx: Context, settings: dict) -> Result:
    import compose_lens.plots as plots
    from compose_lens.analysis.patching import patching_table

    table = patching_table(ctx.model, ctx.config, ctx.split, seed=ctx.seed, **settings)
    return Result(tables={"patching": table},
                  figures=[("patching", plots.patching_figure, (table, "activation patching, value corrupted"), 120)])


def _patching_section(inp, result: Result, settings: dict) -> str:
    import html

    import compose_lens.plots as plots
    from compose_lens.report.page import html_table

    table, n_pairs = result.tables["patching"], settings["n_pairs"]
    top = table.loc[table["mean"].abs().nlargest(3).index]
    found = "; ".join(f"{plots.layer_name(int(r.block))} {r.component} at {r.role}: {r.mean:.2f}"
                      for r in top.itertuples())
    return (f"<p>The value assigned to the queried variable is corrupted; one activation at a time is restored "
            f"from the clean run ({n_pairs} prompt pairs). Positions are grouped by the role they play in each "
            f"prompt. Largest: {html.escape(found)}.</p>"
            + inp.report.figure(plots.patching_figure(table, f"activation patching, value corrupted ({n_pairs} pairs)"),
                                "patching", "Normalised logit difference (0: the corrupted answer, 1: the clean "
                                "one). Rows that are zero everywhere (the absent layer-1 MLP) are left out; "
                                "<code>compose-lens patch --by position</code> gives absolute positions."))


PATCHING = Analysis(name="patching", title="Activation patching by token role", compute=_patching,
                    settings={"n_pairs": 1000, "n_boot": 1000, "corruption": "value", "by": "role",
                              "pairs": None, "metric": "logit_diff"},
                    module="compose_lens.analysis.patching", tables=("patching",), causal=True,
                    section=_patching_section, report_after="dla", exports=("patching_table",))


# -- variant: what the circuit reads in a noisier context -----------------------------------------


def _variant(ctx: Context, settings: dict) -> Result:
    from compose_lens.analysis.variant_reading import variant_reading

    tables, facts = variant_reading(ctx.model, ctx.config, ctx.split, ctx.plan[0], settings["n"], ctx.seed)
    return Result(tables=tables, documents={"variant_reading": facts}, facts=facts)


def _variant_section(inp, result: Result, settings: dict) -> str:
    import html

    from compose_lens.report.page import html_table

    task, facts = inp.config.task, result.documents["variant_reading"]
    by_role, fillers = result.tables["attention_by_role"], result.tables["binding_through_fillers"]
    asked = ", ".join(f"{k}={getattr(task, k)}" for k in ("reassign_rate", "noise_rate", "chain_rate")
                      if getattr(task, k))
    parts = [f"<p>This task is a variant ({html.escape(asked)}; docs/variants.md). Read on {settings['n']} "
             f"sequences ({html.escape(facts['variant_sequences'])}) at the located heads.</p>"]
    if facts.get("router_latest_over_stale") is not None:
        parts.append(f"<p>Reassignment: the router attends from <code>=</code> to the queried variables' latest "
                     f"values with {facts['router_on_queried_values']:.3f} of its weight and to their stale values "
                     f"with {facts['router_on_stale_values']:.3f}; it weights the latest above the stale in "
                     f"{facts['router_latest_over_stale']:.1%} of the sequences that have a stale value.</p>")
    if facts.get("binder_through_one_filler") is not None:  # a question the task does not ask is not a key
        parts.append(f"<p>Fillers: with one filler word between a variable and its value (<code>b is 7</code>) the "
                     f"binder attends from the value to its variable with {facts['binder_through_one_filler']:.3f} "
                     "of its weight (the table: by the number of fillers, and to the token right before the value).</p>")
    if len(by_role):
        wide = by_role.pivot_table(index="role", columns="component", values="mean", sort=False)
        parts.append("<h3>Attention from = by position role</h3>"
                     + html_table([[role, *(f"{v:.3f}" for v in row)] for role, row in wide.iterrows()],
                                  ["role", *wide.columns]))
    else:
        parts.append("<p>No head is located as binder or router: nothing reads the context yet.</p>")
    if len(fillers):
        parts.append("<h3>The binder: from a value to its variable</h3>"
                     + html_table([[int(r.fillers), f"{r.to_variable:.3f}", f"{r.previous:.3f}", int(r.n)]
                                   for r in fillers.itertuples()],
                                  ["fillers between", "attention to its variable", "to the token before", "values"]))
    return "\n".join(parts)


VARIANT = Analysis(name="variant", title="The task variant: what the circuit reads", compute=_variant,
                   settings={"n": 1000}, module="compose_lens.analysis.variant_reading",
                   tables=("attention_by_role", "binding_through_fillers"), documents=("variant_reading",),
                   section=_variant_section,
                   report_after="circuit", applies=lambda config: config.task.is_variant,
                   findings=(Finding("router_latest_over_stale", "reassignment: = weights the latest value above "
                                     "the stale one (share of sequences)", "near 1"),
                             Finding("binder_through_one_filler", "fillers: a value attends to its variable past "
                                     "one filler", "near 1")),
                   exports=("variant_reading", "attention_by_role", "binding_through_fillers"))


def _gradient_applies(config) -> bool:
    from compose_lens.analysis.gradient_terms import problem

    return problem(config.model) is None


def _gradient(ctx: Context, settings: dict) -> Result:
    from compose_lens.analysis import gradient_terms

    table = gradient_terms.shares_of_model(ctx.model, ctx.config, ctx.split, settings["n"], ctx.seed)
    kept = table[table["term"] == gradient_terms.KEPT].set_index("matrix")["cosine"]
    facts = {f"gradient_kept_cosine_{matrix}": float(kept[matrix]) for matrix in gradient_terms.MATRICES}
    ideal = gradient_terms.idealisation(ctx.model, ctx.config.model)
    return Result(tables={"gradient_shares": table}, documents={"idealisation": ideal}, facts=facts)


def _gradient_section(inp, result: Result, settings: dict) -> str:
    import compose_lens.plots as plots
    from compose_lens import runs
    from compose_lens.analysis import gradient_terms
    from compose_lens.report.page import html_table

    ideal, table = result.documents["idealisation"], result.tables["gradient_shares"]
    overlap = (f", embedding_overlap {ideal['embedding_overlap']:g}" if ideal["embeddings"] == "orthogonal" else "")
    measured = [f"the mean cosine between two distinct token embeddings is {ideal['token_mean_cosine']:.3f}"]
    if ideal["frozen_embedding_change"] is not None:
        measured.append(f"the frozen embeddings differ from the fixed ones by at most {ideal['frozen_embedding_change']:.2g}")
    if ideal["forbidden_entry_max"] is not None:
        measured.append(f"the largest entry a writer has outside its residual block is {ideal['forbidden_entry_max']:.2g}")
    parts = [f"<p>The theory reasons about a transformer with orthogonal embeddings and a disentangled residual, "
             f"and keeps one associative-memory term of the gradient that builds binding and routing "
             f"(docs/idealised.md). This model: embeddings <b>{ideal['embeddings']}</b>{overlap}, residual "
             f"<b>{ideal['residual']}</b>; {'; '.join(measured)}. Below, the gradient of the loss with respect to "
             f"each product, written as a sum of named terms (they sum to the full gradient), on "
             f"{settings['n']} training sequences at the final model: a kept term's cosine with the full "
             f"gradient near 1 is the claim holding, near 0 its failing.</p>",
             html_table([[r.matrix, r.term, f"{r.share:.3f}", f"{r.cosine:.3f}"] for r in table.itertuples()],
                        ["product", "term", "share ||term|| / ||full||", "cosine with the full gradient"])]
    if (inp.run_dir / runs.CHECKPOINTS_DIR).is_dir():
        over = gradient_terms.shares_over_training(inp.run_dir, settings["n"], inp.context.seed,
                                                   most=settings["checkpoints"])
        parts.append(inp.report.figure(plots.gradient_shares_figure(over), "gradient_shares",
                                       f"The kept term's cosine with the full gradient at the initial weights and "
                                       f"{over['step'].nunique() - 1} checkpoints, one product a panel."))
    return "\n".join(parts)


GRADIENT = Analysis(name="gradient", title="The theory's gradient claim: the associative-memory term",
                    compute=_gradient, settings={"n": 512, "checkpoints": 12},
                    module="compose_lens.analysis.gradient_terms", tables=("gradient_shares",),
                    documents=("idealisation",), section=_gradient_section, report_after="circuit-discovery",
                    applies=_gradient_applies,
                    findings=(Finding("gradient_kept_cosine_qk0", "layer-1 QK gradient: cosine of the kept "
                                      "(binding) term with the full gradient", "near 1 (the theory)"),
                              Finding("gradient_kept_cosine_qk1", "layer-2 QK gradient: cosine of the kept "
                                      "(routing) term with the full gradient", "near 1 (the theory)")),
                    exports=("shares_of_model", "shares_over_training", "idealisation"))


# -- attention entropy per head at = ------------------------------------------------------------


def _entropy(ctx: Context, settings: dict) -> Result:
    from compose_lens.analysis.attention_entropy import attention_entropy, lowest

    table = attention_entropy(ctx.model, ctx.config, ctx.split, seed=ctx.seed, **settings)
    low = lowest(table)
    return Result(tables={"attention_entropy": table},
                  facts={"lowest_entropy_head_var2": f"blocks.{low['layer']} head {low['head']}" if low else None,
                         "lowest_entropy_var2": low.get("entropy")})


def _entropy_lines(result: Result) -> list[str]:
    table = result.tables["attention_entropy"]
    rows = table[table["kind"] != "all"]
    return [f"  blocks.{r.layer} head {r.head} on {r.kind}: {r.entropy:.2f} nats [{r.low:.2f}, {r.high:.2f}] "
            f"(log 2 = {r.log_2:.2f}, uniform = {r.log_n:.2f})" for r in rows.itertuples()]


def _entropy_section(inp, result: Result, settings: dict) -> str:
    from compose_lens.report.page import html_table

    table = result.tables["attention_entropy"]
    rows = [[f"blocks.{r.layer} head {r.head}", r.kind, f"{r.entropy:.2f} [{r.low:.2f}, {r.high:.2f}]", r.n]
            for r in table.itertuples()]
    return (f"<p>Entropy (nats) of each head's attention from <code>=</code>, mean over {settings['pool_size']} "
            f"sequences of each pool with a 95 % bootstrap interval; log 2 = 0.69 (two positions), uniform over the "
            f"sequence = {table['log_n'].iloc[0]:.2f}.</p>" + html_table(rows, ["head", "kind", "entropy", "n"]))


ENTROPY = Analysis(
    name="attention_entropy", title="Attention entropy per head at =", compute=_entropy,
    settings={"pool_size": 200}, module="compose_lens.analysis.attention_entropy", tables=("attention_entropy",),
    section=_entropy_section, report_after="qk",
    command="entropy", help="attention entropy of every head at '=', by sequence kind",
    options=(Option("--pool-size", "pool_size", "sequences per pool (nine pools)"),),
    describe=_entropy_lines, exports=("attention_entropy",))


ANALYSES: tuple[Analysis, ...] = (PROBES, QK, ENTROPY, FOURIER, SAME_MLP, DLA, ABLATION, PATCHING, VARIANT, GRADIENT)
