"""The analysis registry: one declaration per analysis, read by ``analyze``, the report, the CLI and the API.

An analysis of one model is declared once, as an :class:`Analysis` here (:data:`ANALYSES`, in
the order ``analyze`` runs them):

* its **name** (``analyze`` writes its files into ``OUT/<name>/``, the report reads and keeps them in
  ``RUN_DIR/results/<name>/``) and the **title** of its report section;
* its **settings** with their defaults, in this one place: ``analyze``, the report and its own command
  run it with the same ones, and every file it writes records them (``settings`` in the provenance);
* its **computation**, ``compute(context, settings) -> Result``, over a per-model
  :class:`~compose_lens.context.Context`: what several analyses of one model share (the
  loaded model on the forwards the analyses use, the located circuit, the Fourier subject, the
  probe heads, the constant-operand grid) is made there once per model;
* the **tables** and **documents** its :class:`Result` holds (written as ``<stem>.csv`` with a
  ``<stem>.provenance.json`` beside it, and ``<stem>.json``), from which
  :func:`~compose_lens.context.read` rebuilds it, and its **figures**, drawn by
  :mod:`compose_lens.plots` (by a worker, where ``analyze`` has one);
* optionally: whether it **applies** to a model (``applies(config)``; ``analyze`` and the report
  leave it out where it does not: the variant reading on the study's task), its report **section**
  (``section(inputs, result, settings) -> HTML``, placed after the section ``report_after`` names), the
  **findings** ``analyze`` prints (summary key, what it measures, what the circuit predicts), its own
  **command** (``compose-lens <command> MODEL --out DIR``, with the ``options`` that set its settings:
  integers, choices or a pairs file), a settings check (``validate``) and a memory ``guard``, the lines
  its command prints (``describe``), and the **exports** of its module that are public API
  (``compose_lens.<name>``).

Nothing else names an analysis: :mod:`compose_lens.context` runs a declaration (its guards on every
path: the command, ``analyze``, the report, :func:`compose_lens.context.run_analysis`), the report makes
each registered section with :func:`~compose_lens.context.obtain` (the saved files where they were made
with the same settings, seed and configuration, else computed now and saved), the command line builds
every analysis command and the findings table from the declarations, and ``compose_lens`` resolves the
exports. ``docs/extending.md`` walks through adding one (direct logit attribution, ``dla``).

**This module is imported by the command line before torch** (it builds the parser's registered
commands and the findings table from it): the declarations are plain data, and the functions
they name import the analysis modules, pandas and the figures inside their bodies
(``tests/unit/test_layout.py``, ``LAZY_ALLOWED``). It imports nothing of the report (its sections write
tables with :func:`compose_lens.markup.html_table`): the report reads the registry, not the other way.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Callable

from compose_lens.config import CIRCUIT_METHODS, CORRUPTIONS, DAS_RANKS, DAS_SITES, HEAD_COMPONENTS, PATCH_METRICS
from compose_lens.errors import ComposeLensError

if TYPE_CHECKING:  # annotations only: the command line reads this module before torch
    import pandas as pd

# ``ctx: Context`` below is a compose_lens.context.Context (not imported: that module reads this one)

FIGURES = "figures"  # the folder of an analysis's figures, beside its tables


@dataclass(frozen=True)
class Finding:
    """One row of the table ``analyze`` prints: a summary key, what it measures, what the circuit predicts,
    and the least value that agrees with the prediction (``at_least``; :meth:`verdict`)."""

    key: str
    what: str
    predicts: str
    at_least: float | None = None

    def verdict(self, value) -> str:
        """``agrees`` or ``contradicts`` the prediction, or ``-`` where there is no number to judge."""
        if self.at_least is None or not isinstance(value, (int, float)) or value != value:
            return "-"
        return "agrees" if value >= self.at_least else "contradicts"


@dataclass(frozen=True)
class Option:
    """An option of an analysis's own command: ``--flag VALUE`` sets the setting ``setting``.

    Its type is its default's: a switch (a bool, False by default), an integer (at least ``minimum``), a
    float (its range checked by the analysis's ``validate``), or a string among ``choices``; ``many``: one or
    more such values (``das --ranks 4 16``);
    ``pairs_file``: a path to a file of prompt pairs, or one of ``choices`` where it has any (checked
    before the model loads)."""

    flag: str
    setting: str
    help: str
    minimum: int = 1
    choices: tuple[str, ...] = ()
    pairs_file: bool = False
    many: bool = False  # one or more values (the default is a tuple of them)


@dataclass
class Result:
    """What one analysis of one model found, as the files it writes and the facts ``summary.json`` keeps.

    ``figures``: ``(stem, plots function, its arguments, dpi)``, drawn where the figures are drawn;
    ``drawn``: ``(stem, matplotlib figure, dpi)`` already drawn (where the figure makes the table);
    ``pages``: ``stem -> HTML``, offline pages written beside the figures (``figures/<stem>.html``).
    ``provenance``: what the tables' and documents' provenance records beside the settings (what the
    analysis chose: the MLP the ablation read). ``value``: anything else its command prints (not written)."""

    tables: dict[str, pd.DataFrame] = field(default_factory=dict)
    documents: dict[str, dict] = field(default_factory=dict)
    facts: dict = field(default_factory=dict)
    figures: list[tuple[str, Callable, tuple, int]] = field(default_factory=list)
    drawn: list[tuple[str, Any, int]] = field(default_factory=list)
    pages: dict[str, str] = field(default_factory=dict)
    provenance: dict = field(default_factory=dict)
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
    guard: Callable[[dict, Any], None] | None = None  # (settings, config) -> None or a one-line refusal (memory)
    validate: Callable[[dict], None] | None = None  # (settings) -> None or a one-line refusal, before any load
    describe: Callable[[Result], list[str]] | None = None  # what its command prints
    exports: tuple[str, ...] = ()  # names of ``module`` that are public API
    applies: Callable[[Any], bool] | None = None  # (config) -> whether it reads this model (None: every model)
    in_analyze: bool = True  # False: minutes of fitting, run by its own command only (not by analyze)

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
    """The summary in words (issue 43: raw keys, counts as 1800.0000, an unexplained cos_correlation):
    each number with what it measures, counts as whole numbers, the JSON key kept for the files."""
    import html
    import json

    from compose_lens.analysis.summary import DETAIL_WORDS, MEASURE_WORDS, TYPE_WORDS
    from compose_lens.markup import html_table

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
    name="probes", title="Circuit summary", compute=_probes, module="compose_lens.analysis.summary",
    tables=("scores_by_type",), documents=("circuit_summary",),
    section=_probes_section, anchor="circuit", report_after="dynamics",
    findings=(Finding("prev_token_attention_score", "layer 1: each value attends to its variable", "near 1 (>= 0.9)", 0.9),
              Finding("prev_token_probe_accuracy", "layer 1 writes the variable into the value's stream", "near 1 (>= 0.9)", 0.9),
              Finding("equals_to_operands_score", "layer 1: = attends to the operands", "high (>= 0.5)", 0.5),
              Finding("variable_identity_score", "layer 2 QK: = finds the value of its variable", "high (>= 0.5)", 0.5),
              Finding("equals_to_values_score", "layer 2: = attends to the queried values", "high (>= 0.5)", 0.5),
              Finding("ov_mlp_addition_accuracy", "OV2 -> MLP2 adds the routed values", "near 1 (>= 0.9)", 0.9),
              Finding("key_frequency_strength", "MLP2 post-ReLU variance in its key frequencies", "high (>= 0.5)", 0.5)),
    exports=("circuit_summary", "circuit_measures"))


# -- qk: the two QK views (weights only, 0.1 s each) --------------------------------------------


def _qk(ctx: Context, settings: dict) -> Result:
    import compose_lens.plots as plots
    from compose_lens.analysis import figure_data

    positional, identity = figure_data.qk_matrices(ctx.model, ctx.config, ctx.heads)  # None: no head plays it
    drawn = ({} if positional is None else
             {"positional_qk": plots.positional_qk_figure(positional, block=ctx.heads.binder[0])})
    if identity is not None:
        drawn["variable_identity"] = plots.variable_identity_figure(identity, ctx.config.task.variable_names)
    return Result(tables={name: table for name, (_, table) in drawn.items()},
                  drawn=[(name, fig, 120) for name, (fig, _) in drawn.items()])


def _positional_caption(positional, task, binder: tuple[int, int]) -> str:
    """What the positional figure shows and marks, with where its rows peak (issue 43: the outlines sat one
    below the diagonal, the peaks on it, and nothing said why)."""
    from compose_lens.analysis.probes import positional_peaks, previous_position_fraction
    from compose_lens.plots import layer_name

    peaks = positional_peaks(positional)
    fillers = (" (with filler words inside an assignment the variable can sit further back)"
               if task.noise_rate > 0 else "")
    return (f"The binder's ({layer_name(binder[0])} head {binder[1]}) attention from position alone: the "
            "softmax, over the keys a query may attend to, of the positional part of its score, "
            "P W_Q (P W_K)^T / sqrt(d_head) (query position row, key position column, later keys blank), in "
            "attention weight, the unit of the attention views. Outlined: the key one back, the variable's "
            "when the query holds a value, where the previous-token head peaks on real sequences (the "
            f"attention view above){fillers}; any position after the first can hold a value, the padding "
            f"being scattered. Position alone puts a row's peak on the diagonal (the query itself) in "
            f"{peaks['on_diagonal']} of {peaks['query_positions']} query positions and one back in "
            f"{peaks['just_below']}; among the earlier keys alone, one back scores highest in "
            f"{previous_position_fraction(positional):.0%} of them. Where an outlined cell is not its row's "
            "peak here, the look back comes from the tokens (the key is a variable), not from position.")


def _qk_section(inp, result: Result, settings: dict) -> str:
    """The two figures the analysis draws, of the located binder and router."""
    import html

    import compose_lens.plots as plots
    from compose_lens.analysis import figure_data

    heads = inp.context.heads
    positional, identity = figure_data.qk_matrices(inp.model, inp.config, heads)
    parts = [f"<p>The heads read: {html.escape(heads.how)}.</p>"]
    if positional is not None:
        parts.append(inp.report.figure(plots.positional_qk_figure(positional, block=heads.binder[0]),
                                       "positional_qk", _positional_caption(positional, inp.config.task,
                                                                            heads.binder)))
    if identity is not None:
        parts.append(inp.report.figure(plots.variable_identity_figure(identity, inp.config.task.variable_names),
                                       "variable_identity", "The router's variable-identity score: a query = "
                                       "carrying one variable (row) against a key value tagged with another "
                                       "(column); the diagonal is the matching variable."))
    if positional is None and identity is None:
        parts.append('<p class="missing">No head plays the binder, so there is no QK circuit to draw.</p>')
    return "\n".join(parts)


QK = Analysis(name="qk", title="Previous-token head and variable-identity routing", compute=_qk,
              tables=("positional_qk", "variable_identity"), section=_qk_section, report_after="attention")


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
    """The key frequencies the analysis found, and the adder's neuron best explained by one of them."""
    import html

    import compose_lens.plots as plots
    from compose_lens.analysis import figure_data

    facts = result.documents["key_frequencies"]
    if not facts["key_frequencies"]:
        return (f"<p>Analysed: blocks.{facts['mlp_block']}.mlp. No key frequency yet: no neuron is explained by "
                f"one frequency, so there is no Fourier neuron to draw.</p>")
    chosen = figure_data.fourier_neuron(inp.model, inp.config, inp.split)
    return (f"<p>Analysed: blocks.{facts['mlp_block']}.mlp ({html.escape(facts['fourier_subject']['note'])}). "
            f"Key frequencies {facts['key_frequencies']}, holding {facts['key_frequency_strength']:.3f} of its "
            f"post-ReLU variance over the constant-operand grid; <code>compose-lens fourier</code> writes every "
            f"table and figure.</p>"
            + inp.report.figure(plots.fourier_neuron_figure(chosen), "fourier_neuron",
                                "The MLP neuron best explained by a key frequency, over all (x, y) of "
                                "constant-operand sequences, beside its fitted ideal pattern."))


FOURIER = Analysis(
    name="fourier", title="The MLP adds: Fourier analysis of the adder", compute=_fourier,
    section=_fourier_section, report_after="jump",
    module="compose_lens.analysis.fourier",
    tables=("neuron_frequencies", "best_neurons", "readout_fourier", "excluded_loss", "embedding_fourier"),
    documents=("locate", "key_frequencies", "constants_vs_variables"),
    command="fourier", help="Fourier analysis of the adder MLP (located; the paper's MLP2): key frequencies and losses",
    describe=_fourier_lines, exports=("operand_grid", "key_frequencies", "key_frequency_strength", "best_neurons"))


# -- same_mlp: one MLP for constants and variables? ---------------------------------------------


def _same_mlp(ctx: Context, settings: dict) -> Result:
    import compose_lens.plots as plots
    from compose_lens.analysis import same_mlp
    from compose_lens.files import json_safe

    layout = same_mlp.layout_of(ctx.model, ctx.config, ctx.split, ctx.seed)
    tables = same_mlp.same_mlp_tables(ctx.model, ctx.config, ctx.split, ctx.seed, n=settings["n"], layout=layout)
    report = dict(same_mlp.same_mlp_report(ctx.model, ctx.config, ctx.split, seed=ctx.seed, n=settings["n"],
                                           tables=tables, layout=layout))
    trimmed = {k: v for k, v in report.items() if k not in ("tables", "config", "code_version", "seed")}
    # summary.json keeps the verdict; same_mlp.json keeps every test, and the CSVs the tables (none where a
    # role is not located: then there is nothing to test, and the verdict says why)
    return Result(tables={f"same_mlp_{name}": table for name, table in tables.items()},
                  documents={"same_mlp": json_safe(report)}, facts={"same_mlp": json_safe(trimmed)},
                  figures=[("same_mlp", plots.same_mlp_figure, (report,), 110)] if tables else [])


def _same_mlp_lines(result: Result) -> list[str]:
    from compose_lens.analysis import same_mlp

    report = result.documents["same_mlp"]
    table = same_mlp.verdict_table(report).to_string(index=False, float_format=lambda v: f"{v:.3f}")
    because = [] if report["verdict"] == "supported" else [f"  because: {report['verdict_reason']}"]
    return [f"tests read: {report['components']['how']}", table,
            f"verdict: {report['verdict']}  (thresholds: see same_mlp.json; {report['n_prompts']} prompts per set)",
            *because]


def _same_mlp_guard(settings: dict, config) -> None:
    """The layout the tests read (one line, before minutes of work), then six prompt sets of ``n``, and as
    many again for the damage profiles and the probes."""
    from compose_lens.analysis.same_mlp import check_layout
    from compose_lens.safety import check_sizes, kept_activation_bytes

    check_layout(config)
    check_sizes(config, {f"--n {settings['n']}": (settings["n"], 12)}, kept_activation_bytes(config))


def _same_mlp_section(inp, result: Result, settings: dict) -> str:
    """The causal tests that can fail (operand interchange, feature transfer, representation
    transfer) with their controls and verdict, then the correlational cosines."""
    import html

    import compose_lens.plots as plots
    from compose_lens.analysis import figure_data, same_mlp
    from compose_lens.markup import html_table

    report = result.documents["same_mlp"]
    table = same_mlp.verdict_table(report)
    columns = [c for c in ("test", "status", "effect", "ci_low", "ci_high", "condition", "reference") if c in table]
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


SAME_MLP = Analysis(
    name="same_mlp", title="Same MLP for constants and variables", compute=_same_mlp, settings={"n": 400},
    module="compose_lens.analysis.same_mlp", documents=("same_mlp",),
    tables=tuple(f"same_mlp_{name}" for name in ("interchange", "damage_profiles", "feature_transfer", "probe",
                                                 "competence")),
    section=_same_mlp_section, anchor="same-mlp", report_after="ablation",
    command="same-mlp", help="does MLP2 add variables with the features it uses for constants? three tests that "
                             "can fail, and a verdict",
    options=(Option("--n", "n", "prompts per prompt set", minimum=20),), guard=_same_mlp_guard,
    describe=_same_mlp_lines, exports=("same_mlp_report",))


# -- dla: direct logit attribution and the logit lens at = --------------------------------------


def _dla(ctx: Context, settings: dict) -> Result:
    import compose_lens.plots as plots
    from compose_lens.analysis import logit_attribution

    model, config, split = ctx.model, ctx.config, ctx.split
    table = logit_attribution.logit_attribution(model, config, split, settings["n"], ctx.seed)
    lens = logit_attribution.logit_lens(model, config, split, settings["n"], ctx.seed)
    by_pool = logit_attribution.logit_attribution(model, config, split, settings["n"], ctx.seed, by="pool")
    return Result(tables={"logit_attribution": table, "logit_lens": lens, "logit_attribution_by_pool": by_pool},
                  figures=[("logit_attribution", plots.logit_attribution_figure, (table, lens, by_pool), 120)])


def _dla_section(inp, result: Result, settings: dict) -> str:
    import compose_lens.plots as plots
    from compose_lens.markup import html_table

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
            + inp.report.figure(plots.logit_attribution_figure(table, lens,
                                                               result.tables.get("logit_attribution_by_pool")),
                                "logit_attribution",
                                "Left: each component's direct contribution per pool with its 95 % interval, but "
                                "the one that writes nearly the whole margin (named above the panel); a sign that "
                                "differs between training and add-restricted pools shows here. Right: logit-lens "
                                "accuracy after each stage."))


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
    tables=("logit_attribution", "logit_lens", "logit_attribution_by_pool"), section=_dla_section,
    report_after="fourier",
    command="dla", help="direct logit attribution and logit lens at '='",
    options=(Option("--n", "n", "sequences, drawn evenly from the nine pools", minimum=9),),
    guard=lambda settings, config: _dla_memory(settings, config),
    describe=_dla_lines, exports=("logit_attribution", "logit_lens"))


# -- ablation and patching: the causal tables ---------------------------------------------------


def _ablation(ctx: Context, settings: dict) -> Result:
    import compose_lens.plots as plots
    from compose_lens.analysis.ablation import ablation_table

    table = ablation_table(ctx.model, ctx.config, ctx.split, seed=ctx.seed, **settings)
    subject = table.attrs.get("neuron_subject")
    return Result(tables={"ablation": table}, figures=[("ablation", plots.ablation_figure, (table,), 120)],
                  provenance={"neuron_subject": subject}, value=subject)


def _ablation_lines(result: Result) -> list[str]:
    """The table's size and its three largest accuracy drops (single neurons left out: ablation.csv has them)."""
    table = result.tables["ablation"]
    shown = table[table["target"] != "neuron"]
    top = shown.loc[shown["accuracy_drop"].nlargest(3).index]
    note = [f"  neurons and Fourier directions: {result.value['note']}"] if result.value else []
    return [f"  {len(table)} rows; the largest drops:",
            *(f"    {r.target} (blocks.{r.block}, {r.kind} ablation) on {r.pool}: accuracy {r.baseline_accuracy:.3f} "
              f"-> {r.accuracy:.3f}" for r in top.itertuples()), *note]


def _ablation_memory(settings: dict, config) -> None:
    """Nine pools of ``pool_size`` (joined once more into one batch); kept of each sequence: MLP2's
    activations at ``=`` and the direct path, the logits of an ablation, and the activations read
    for the replacement."""
    from compose_lens.safety import check_sizes, kept_activation_bytes

    m, n = config.model, settings["pool_size"]
    kept = 4 * (2 * m.d_mlp + 3 * m.d_vocab_out) + 8 * config.task.seq_len + kept_activation_bytes(config)
    check_sizes(config, {f"--pool-size {n}": (n, 9)}, kept)


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
                    causal=True, section=_ablation_section, report_after="patching",
                    command="ablate", help="zero/mean/resample ablation, accuracy on the nine pools",
                    options=(Option("--pool-size", "pool_size", "sequences per pool"),), guard=_ablation_memory,
                    describe=_ablation_lines, exports=("ablation_table",))


def _patching(ctx: Context, settings: dict) -> Result:
    import compose_lens.plots as plots
    from compose_lens.analysis.patching import patching_table

    table = patching_table(ctx.model, ctx.config, ctx.split, seed=ctx.seed, **settings)
    corruption, n_pairs = table["corruption"].iloc[0], int(table["n_pairs"].iloc[0])
    metric = "" if settings["metric"] == "logit_diff" else f", metric {settings['metric']}"
    title = f"activation patching, {corruption} corrupted ({n_pairs} pairs{metric})"
    return Result(tables={"patching": table}, figures=[("patching", plots.patching_figure, (table, title), 120)])


def _largest_sites(table, k: int):
    """The ``k`` sites of a patching table that restore the most, outside the residual stream: restoring
    the stream at the corrupted token restores the answer by construction, and its three names there
    (resid_mid, resid_post, the next block's resid_pre) are one tensor."""
    found = table[~table["component"].str.startswith("resid")]
    return found.loc[found["mean"].abs().nlargest(k).index]


def _patching_lines(result: Result) -> list[str]:
    """The table's size and its largest sites (:func:`_largest_sites`) with their intervals."""
    table = result.tables["patching"]
    where = table["by"].iloc[0]  # role or position
    first = table.iloc[0]
    top = _largest_sites(table, 5)
    pairs = "from your pairs file" if first["corruption"] == "user" else f"({first['corruption']} corrupted)"
    return [f"  {len(table)} rows by {where}, {int(first['n_pairs'])} pairs {pairs}; "
            f"restored most, outside the residual stream (0: the corrupted answer, 1: the clean one):",
            *(f"    blocks.{int(r.block)} {r.component}{'' if int(r.head) < 0 else f' head {int(r.head)}'} at "
              f"{getattr(r, where)}: {r.mean:.3f} [{r.ci_low:.3f}, {r.ci_high:.3f}]" for r in top.itertuples())]


N_ROLES = 12  # analysis.patching.ROLES + VARIANT_ROLES, at most


def _patching_memory(settings: dict, config) -> None:
    """Per pair: the clean and corrupted prompts (``variable`` draws four 1-var prompts per pair and
    keeps the corrupted copy); kept: every site's patched logit difference (float32) and its
    float64 gain and mask, the bootstrap's counts and draws, the role one-hots, and (on the hook
    path) the clean prompt's cached activations."""
    from compose_lens.safety import check_sizes, kept_activation_bytes

    m, n = config.model, settings["n_pairs"]
    sites = m.n_layers * m.n_ctx * (5 + m.n_heads)  # analysis.patching.all_sites: five components, z per head
    kept = 20 * sites + 16 * settings["n_boot"] + 8 * m.n_ctx * N_ROLES + kept_activation_bytes(config)
    check_sizes(config, {f"--n-pairs {n}": (n, 5 if settings["corruption"] == "variable" else 2, kept)})


def _patching_settings(settings: dict) -> None:
    if settings["pairs"] is not None and settings["corruption"] != "value":
        raise ComposeLensError(f"--corruption {settings['corruption']} makes pairs and --pairs brings them; give one")


def _patching_section(inp, result: Result, settings: dict) -> str:
    import html

    import compose_lens.plots as plots

    table, n_pairs = result.tables["patching"], settings["n_pairs"]
    found = "; ".join(f"{plots.layer_name(int(r.block))} {r.component} at {r.role}: {r.mean:.2f}"
                      for r in _largest_sites(table, 3).itertuples())
    return (f"<p>The value assigned to the queried variable is corrupted; one activation at a time is restored "
            f"from the clean run ({n_pairs} prompt pairs). Positions are grouped by the role they play in each "
            f"prompt. Restored most, outside the residual stream: {html.escape(found)}.</p>"
            + inp.report.figure(plots.patching_figure(table, f"activation patching, value corrupted ({n_pairs} pairs)"),
                                "patching", "Normalised logit difference (0: the corrupted answer, 1: the clean "
                                "one). Rows that are zero everywhere (the absent layer-1 MLP) are left out; "
                                "<code>compose-lens patch --by position</code> gives absolute positions."))


PATCHING = Analysis(
    name="patching", title="Activation patching by token role", compute=_patching,
    settings={"n_pairs": 1000, "n_boot": 1000, "corruption": "value", "by": "role", "pairs": None,
              "metric": "logit_diff"},
    module="compose_lens.analysis.patching", tables=("patching",), causal=True,
    section=_patching_section, report_after="dla",
    command="patch", help="activation patching by component, layer and token role (or position)",
    options=(Option("--corruption", "corruption", "what the corrupted prompt changes", choices=CORRUPTIONS),
             Option("--n-pairs", "n_pairs", "clean/corrupted prompt pairs", minimum=2),
             Option("--by", "by", "group positions by token role or keep absolute positions",
                    choices=("role", "position")),
             Option("--pairs", "pairs", "a CSV / JSONL file of your own prompt pairs, columns clean and corrupted "
                    "(readable form or token ids); replaces --corruption and --n-pairs", pairs_file=True),
             Option("--metric", "metric", "logit difference of the two answers, probability or accuracy of the "
                    "clean answer", choices=PATCH_METRICS)),
    guard=_patching_memory, validate=_patching_settings, describe=_patching_lines, exports=("patching_table",))


# -- patch-heads and path-patch: patching finer than a whole component -------------------------------

HEAD_INPUTS = ("q", "k", "v", "pattern")  # patch-heads' default components (z: the head's output, on request)
SHOWN_SITES, SMALL_EFFECT = 12, 0.005  # patch-heads prints at most this many sites, none moving it less


def _pairs_words(table, settings: dict) -> str:
    source = f" from {settings['pairs']}" if settings.get("pairs") else f", {table['corruption'].iloc[0]} corrupted"
    metric = "" if settings["metric"] == "logit_diff" else f", metric {settings['metric']}"
    return f"{int(table['n_pairs'].iloc[0])} pairs{source}{metric}"


def _fine_patching_memory(settings: dict, config) -> None:
    """Per pair: the clean and corrupted prompts (``variable`` draws four 1-var prompts per pair),
    the clean run's cached activations, and per site and pair the patched value and the
    bootstrap's float64 gain and mask (as ``patch``'s guard counts them)."""
    from compose_lens.safety import check_sizes, kept_activation_bytes

    m, n = config.model, settings["n_pairs"]
    sites = m.n_layers * m.n_ctx * m.n_heads * len(HEAD_COMPONENTS)
    kept = 20 * sites + 16 * PATCHING.settings["n_boot"] + kept_activation_bytes(config)
    check_sizes(config, {f"--n-pairs {n}": (n, 5 if settings["corruption"] == "variable" else 2, kept)})


def _head_patching(ctx: Context, settings: dict) -> Result:
    import compose_lens.plots as plots
    from compose_lens import runs
    from compose_lens.analysis.patching import head_patching_table

    chosen = {k: v for k, v in settings.items() if k != "components"}
    table = head_patching_table(runs.with_bridge(ctx.loaded), components=tuple(dict.fromkeys(settings["components"])),
                                seed=ctx.seed, n_boot=PATCHING.settings["n_boot"], **chosen)
    title = f"per-head patching ({_pairs_words(table, settings)})"
    return Result(tables={"patching_heads": table}, figures=[("patching_heads", plots.patching_figure, (table, title), 120)],
                  value=settings)


def _head_patching_lines(result: Result) -> list[str]:
    """The sites with the largest effects (at most :data:`SHOWN_SITES`, none below :data:`SMALL_EFFECT`)."""
    from compose_lens.plots import metric_words
    from compose_lens.stats import format_estimate

    table, settings = result.tables["patching_heads"], result.value or {}
    top = table.loc[table["mean"].abs().sort_values(ascending=False, kind="stable").index[:SHOWN_SITES]]
    top = top[top["mean"].abs() >= SMALL_EFFECT]
    labels = [f"{r.component} of blocks.{r.block} head {r.head} at "
              + (r.role if "position" not in table or r.role != "context" else f"position {r.position}")
              for r in top.itertuples()]
    width = max(map(len, labels), default=0)
    lines = [f"per-head patching of {', '.join(dict.fromkeys(table['component']))} "
             f"({_pairs_words(table, settings)}); normalised {metric_words(settings.get('metric', 'logit_diff'))}, "
             f"0: corrupted, 1: clean, [95 % bootstrap interval]:"]
    lines += [f"  {label.ljust(width)}  {format_estimate(r.mean, r.ci_low, r.ci_high)}"
              for label, r in zip(labels, top.itertuples())]
    if top.empty:
        lines.append(f"  (no site moves it by {SMALL_EFFECT} or more)")
    elif len(table) > len(top):
        lines.append(f"  ({len(table) - len(top)} more rows in the CSV, each smaller)")
    return lines


HEAD_PATCHING = Analysis(
    name="patching_heads", title="Per-head patching of queries, keys, values and patterns", compute=_head_patching,
    settings={"components": HEAD_INPUTS, "by": "role", "corruption": "value", "n_pairs": 1000, "pairs": None,
              "metric": "logit_diff"},
    module="compose_lens.analysis.patching", tables=("patching_heads",), causal=True, in_analyze=False,
    command="patch-heads", help="per-head patching of queries, keys, values and attention patterns, by token role "
                                "or position",
    options=(Option("--component", "components", "a head's q, k, v, pattern (a destination's row) or z (its output)",
                    choices=HEAD_COMPONENTS, many=True),
             Option("--by", "by", "group positions by token role or keep absolute positions", choices=("role", "position")),
             Option("--corruption", "corruption", "what the corrupted prompt changes", choices=CORRUPTIONS),
             Option("--n-pairs", "n_pairs", "clean/corrupted prompt pairs", minimum=2),
             Option("--pairs", "pairs", "a CSV / JSONL file of your own prompt pairs, columns clean and corrupted; "
                    "replaces --corruption and --n-pairs", pairs_file=True),
             Option("--metric", "metric", "logit difference of the two answers, probability or accuracy of the "
                    "clean answer", choices=PATCH_METRICS)),
    guard=_fine_patching_memory, validate=_patching_settings,
    describe=_head_patching_lines)


def _path_patching(ctx: Context, settings: dict) -> Result:
    import compose_lens.plots as plots
    from compose_lens import runs
    from compose_lens.analysis.patching import path_patching

    receivers = list(dict.fromkeys(settings["receivers"]))
    chosen = {k: v for k, v in settings.items() if k not in ("sender", "receivers")}
    table = path_patching(runs.with_bridge(ctx.loaded), sender=settings["sender"], receivers=receivers,
                          seed=ctx.seed, n_boot=PATCHING.settings["n_boot"], **chosen)
    title = f"path patching from {settings['sender']} ({_pairs_words(table, settings)})"
    return Result(tables={"path_patching": table}, figures=[("path_patching", plots.path_patching_figure,
                                                             (table, title), 120)], value=settings)


def _path_patching_lines(result: Result) -> list[str]:
    from compose_lens.plots import metric_words
    from compose_lens.stats import format_estimate

    table, settings = result.tables["path_patching"], result.value or {}
    labels = [f"{s} -> {r}" if r != "all" else f"{s} alone (every path)"
              for s, r in zip(table["sender"], table["receiver"])]
    width = max(map(len, labels))
    return [f"path patching ({_pairs_words(table, settings)}); normalised "
            f"{metric_words(settings.get('metric', 'logit_diff'))}, 0: corrupted, 1: clean, [95 % bootstrap interval]:",
            *(f"  {label.ljust(width)}  {format_estimate(r.mean, r.ci_low, r.ci_high)}"
              for label, r in zip(labels, table.itertuples()))]


def _path_names(settings: dict, config) -> None:
    """A sender or receiver that cannot be, refused before the model loads (the config is read from
    the model's files), and the memory guard."""
    from compose_lens.analysis.patching import check_path, path_end

    sender = path_end(settings["sender"], "sender", config.model)
    for receiver in settings["receivers"]:
        check_path(sender, path_end(receiver, "receiver", config.model))
    _fine_patching_memory(settings, config)


PATH_PATCHING = Analysis(
    name="path_patching", title="Path patching: a sender's output reaching one receiver only",
    compute=_path_patching,
    settings={"sender": "blocks.0.head0", "receivers": ("blocks.1.head0.q", "blocks.1.head0.k", "blocks.1.head0.v"),
              "corruption": "value", "n_pairs": 1000, "pairs": None, "metric": "logit_diff"},
    module="compose_lens.analysis.patching", tables=("path_patching",), causal=True, in_analyze=False,
    command="path-patch", help="path patching: a sender's output reaching one receiver only",
    options=(Option("--sender", "sender", "a head's output, blocks.L.headH, or an MLP's, blocks.L.mlp (blocks from 0)"),
             Option("--receiver", "receivers", "a later head's query, key or value, blocks.L.headH.q|k|v, or an "
                    "MLP's input, blocks.L.mlp", many=True),
             Option("--corruption", "corruption", "what the corrupted prompt changes", choices=CORRUPTIONS),
             Option("--n-pairs", "n_pairs", "clean/corrupted prompt pairs", minimum=2),
             Option("--pairs", "pairs", "a CSV / JSONL file of your own prompt pairs, columns clean and corrupted; "
                    "replaces --corruption and --n-pairs", pairs_file=True),
             Option("--metric", "metric", "logit difference of the two answers, probability or accuracy of the "
                    "clean answer", choices=PATCH_METRICS)),
    guard=_path_names, validate=_patching_settings, describe=_path_patching_lines)


# -- circuit: automatic circuit discovery on the edge graph ------------------------------------------

CIRCUIT_PAIRS = ("resample", "mixed")  # analysis.circuit.PAIRS


def _circuit(ctx: Context, settings: dict) -> Result:
    import compose_lens.plots as plots
    from compose_lens.analysis.circuit import discover
    from compose_lens.circuit_view import circuit_page
    from compose_lens.files import json_safe

    s = settings
    kind, pairs = (s["pairs"], None) if s["pairs"] in CIRCUIT_PAIRS else ("resample", s["pairs"])
    if pairs is not None:  # read here: the summary counts the file's pairs
        from compose_lens.data.pairs import as_prompt_pairs

        pairs = as_prompt_pairs(ctx.split.task, pairs)
    found = discover(ctx.model, ctx.config, ctx.split, s["method"], s["n_pairs"], ctx.seed, kind, s["positions"],
                     s["target"], s["threshold"], pairs=pairs, metric=s["metric"])
    recovered = found.pools["recovered"].min() if "recovered" in found.pools else None  # no pool has two answers
    summary = json_safe({**found.summary, "title": found.title, "pairs": str(s["pairs"]),
                         "n_pairs": s["n_pairs"] if pairs is None else len(pairs),
                         "min_pool_recovered": None if recovered is None else float(recovered)})
    return Result(tables={"circuit": found.edges, "circuit_pools": found.pools}, documents={"circuit": summary},
                  figures=[("circuit", plots.circuit_figure, (found.edges, found.title, summary["metric"]), 120)],
                  pages={"circuit": circuit_page(found.edges, found.title, summary["metric"])})  # hover, slider


def _circuit_lines(result: Result) -> list[str]:
    from compose_lens.stats import format_estimate

    s = result.documents["circuit"]
    auc = "" if s["roc_auc"] is None else (
        f", ROC-AUC {format_estimate(s['roc_auc'], *(s.get('roc_auc_ci95') or [None, None]))} (95 % bootstrap "
        f"over the edges; {s['labelled_edges'][0]} labelled, {s['labelled_edges'][1]} not) against {s['labelled']}")
    ci = s.get("circuit_edges_ci95")
    size_ci = "" if ci is None else f" [{ci[0]}, {ci[1]}] (95 % bootstrap over the pairs)"
    lines = [f"  {s['method']}: {s['circuit_edges']}{size_ci} of {s['edges']} edges in the circuit{auc}"]
    if s["roc_auc"] is None:
        lines.append(f"  not scored against a circuit: {s['labelled']} (inconclusive)")
    if s["min_pool_recovered"] is None:
        lines.append("  circuit_pools.csv is empty: no evaluation pool of this split has prompts with two different "
                     "answers, so the circuit could not be checked on the pools")
    return lines


def _circuit_section(inp, result: Result, settings: dict) -> str:
    """The found circuit, scored against the labelled one, and its faithfulness on every pool."""
    import html

    import compose_lens.plots as plots
    from compose_lens.circuit_view import circuit_view
    from compose_lens.markup import html_table

    s, edges, pools = result.documents["circuit"], result.tables["circuit"], result.tables["circuit_pools"]
    against = "the paper's labelled circuit" if s["labelled"] == "the paper's circuit" else s["labelled"]
    auc = (f"; not scored against a circuit, {html.escape(against)}" if s["roc_auc"] is None
           else f"; ROC-AUC against {html.escape(against)} {s['roc_auc']:.3f}")
    rows = pools[["pool", "recovered"]].values.tolist() if "pool" in pools else []
    return (f"<p>Edge attribution patching with integrated gradients on {settings['pairs']} pairs: "
            f"{s['circuit_edges']} of {s['edges']} edges recover {settings['target']:.0%} of the clean-vs-corrupted "
            f"logit difference{auc} ({s['seconds']:.1f} s). <code>compose-lens circuit</code> runs the other "
            f"methods (exact path patching, EAP, EAP-IG on the inputs, ACDC).</p>"
            + inp.report.figure(plots.circuit_figure(edges, s["title"], s["metric"]), "circuit",
                                "The found circuit: components in forward order, each edge coloured by "
                                "its |score| (colour bar), solid if in the circuit, grey dashed if not; "
                                "attention takes its q, k and v inputs at three ports on its left edge.")
            + "<details><summary>The same graph to explore: hover an edge or a component for its score, the "
              "slider hides the edges below a |score| (<code>figures/circuit.html</code> of "
              f"<code>compose-lens circuit</code>)</summary>{circuit_view(edges, s['title'], s['metric'])}</details>"
            + (html_table(rows, ["pool", "share of the metric the circuit recovers"]) if rows else ""))


def _circuit_settings(settings: dict) -> None:
    if not 0 < settings["target"] <= 1:
        raise ComposeLensError(f"--target {settings['target']}: give a share in (0, 1]")
    if not 0 <= settings["threshold"] < 1:
        raise ComposeLensError(f"--threshold {settings['threshold']}: give a share in [0, 1)")
    if settings["metric"] == "accuracy" and settings["method"] in ("eap", "eap-ig", "eap-ig-inputs"):
        raise ComposeLensError(f"--metric accuracy has no gradient, which {settings['method']} follows; use "
                               f"--method exact or acdc with it, or --metric logit_diff or prob")


def _circuit_memory(settings: dict, config) -> None:
    """Per pair: up to five prompts rendered (``mixed``'s variable corruption draws four per pair;
    ``resample`` draws a pool and its partners); kept: every node's output on the clean and the
    corrupted prompt (the baseline the masked runs patch from), and one forward over all pairs
    with its activations kept for the edge-mask gradient (EAP, EAP-IG), the masks and their
    gradient (R, E) included. (The pools' faithfulness check, 4,500 prompts whatever
    ``--n-pairs``, is a few MB: left out.)"""
    from compose_lens.safety import activation_bytes, check_sizes

    m, n = config.model, settings["n_pairs"]
    nodes = 1 + m.n_layers * (m.n_heads + 1)  # the embeddings, every head and every MLP
    edges = nodes ** 2 * (m.n_ctx if settings["positions"] else 1)  # more than the graph has
    kept = 2 * 4 * m.n_ctx * m.d_model * nodes + activation_bytes(config, training=True) + 8 * edges
    check_sizes(config, {f"--n-pairs {n}": (n, 5, kept)})


def _circuit_applies(config) -> bool:
    from compose_lens.coverage import circuit_problem

    return circuit_problem(config.model) is None


CIRCUIT = Analysis(
    name="circuit", title="Circuit discovery (EAP-IG) against the known circuit", compute=_circuit,
    settings={"method": "eap-ig", "n_pairs": 300, "pairs": "resample", "metric": "logit_diff", "positions": False,
              "target": 0.95, "threshold": 0.01},
    module="compose_lens.analysis.circuit", tables=("circuit", "circuit_pools"), documents=("circuit",),
    causal=True, section=_circuit_section, anchor="circuit-discovery", report_after="same-mlp",
    applies=_circuit_applies,
    command="circuit", help="automatic circuit discovery (exact, EAP, EAP-IG, ACDC)",
    options=(Option("--method", "method", "how edges are scored", choices=CIRCUIT_METHODS),
             Option("--n-pairs", "n_pairs", "clean/corrupted prompt pairs", minimum=6),
             Option("--pairs", "pairs", "resample: another prompt of the same pool; mixed: the one-token "
                    "corruptions; or a CSV / JSONL file of your own clean,corrupted pairs (--n-pairs then unused)",
                    choices=CIRCUIT_PAIRS, pairs_file=True),
             Option("--metric", "metric", "what the edges are scored on: logit difference, probability or "
                    "accuracy of the clean answer (accuracy: exact and acdc only)", choices=PATCH_METRICS),
             Option("--positions", "positions", "split every edge by position"),
             Option("--threshold", "threshold", "ACDC's pruning threshold (share)"),
             Option("--target", "target", "performance the found circuit recovers")),
    guard=_circuit_memory, validate=_circuit_settings, describe=_circuit_lines)


# -- das: distributed alignment search for the variable-value binding ---------------------------------

def _das(ctx: Context, settings: dict) -> Result:
    import compose_lens.plots as plots
    from compose_lens import runs
    from compose_lens.analysis.das import DasSettings, das_table

    chosen = DasSettings(n_pairs=settings["n_pairs"], ranks=tuple(settings["ranks"]), sites=tuple(settings["sites"]),
                         epochs=settings["epochs"], arbitrary_control=not settings["no_arbitrary"], seed=ctx.seed)
    chosen.check(ctx.config.model.d_model)
    table, summary = das_table(runs.with_bridge(ctx.loaded), chosen)  # TransformerLens's fit_das reads hooks
    figure = plots.das_figure(table, f"DAS for the variable-value binding: {ctx.loaded.source}")
    return Result(tables={"das": table}, documents={"das": {"model": ctx.loaded.source, **summary}},
                  drawn=[("das", figure, 120)])


def _das_lines(result: Result) -> list[str]:
    from compose_lens.analysis.das import best_rows

    s = result.documents["das"]
    return [f"pairs: {s['pairs_kept']} of {s['pairs_drawn']} answered correctly (base and source); "
            f"{s['pairs_train']} train DAS, {s['pairs_test']} score it",
            best_rows(result.tables["das"]).to_string(index=False, float_format=lambda v: f"{v:.3f}")]


def _das_settings(settings: dict) -> None:
    if min(settings["ranks"]) < 1:
        raise ComposeLensError(f"--ranks {min(settings['ranks'])}: a subspace has at least 1 dimension")


def _das_memory(settings: dict, config) -> None:
    """A base and a source per pair, each run through the model with its hooks."""
    from compose_lens.safety import activation_bytes, check_sizes

    n = settings["n_pairs"]
    check_sizes(config, {f"--n-pairs {n}": (n, 2, 2 * activation_bytes(config, False))})


DAS = Analysis(
    name="das", title="Distributed alignment search for the variable-value binding", compute=_das,
    settings={"n_pairs": 600, "ranks": DAS_RANKS, "sites": DAS_SITES, "epochs": 15, "no_arbitrary": False},
    module="compose_lens.analysis.das", tables=("das",), documents=("das",), causal=True, in_analyze=False,
    command="das", help="distributed alignment search for the variable-value binding, with its controls",
    options=(Option("--ranks", "ranks", "subspace ranks", many=True),
             Option("--sites", "sites", "where to search", choices=DAS_SITES, many=True),
             Option("--n-pairs", "n_pairs", "pairs drawn; those the model answers correctly are kept", minimum=30),
             Option("--epochs", "epochs", "DAS training epochs"),
             Option("--no-arbitrary", "no_arbitrary", "skip the arbitrary-label control (one more fit per site, "
                    "at the largest rank)")),
    guard=_das_memory, validate=_das_settings, describe=_das_lines)


# -- variant: what the circuit reads in a noisier context -----------------------------------------


def _variant(ctx: Context, settings: dict) -> Result:
    from compose_lens.analysis.variant_reading import variant_reading

    tables, facts = variant_reading(ctx.model, ctx.config, ctx.split, ctx.plan[0], settings["n"], ctx.seed)
    return Result(tables=tables, documents={"variant_reading": facts}, facts=facts)


def _variant_section(inp, result: Result, settings: dict) -> str:
    import html

    from compose_lens.markup import html_table

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
                                     "the stale one (share of sequences)", "near 1 (>= 0.9)", 0.9),
                             Finding("binder_through_one_filler", "fillers: a value attends to its variable past "
                                     "one filler", "near 1 (>= 0.9)", 0.9)),
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
    from compose_lens.markup import html_table

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
                                      "(binding) term with the full gradient", "near 1, the theory (>= 0.9)", 0.9),
                              Finding("gradient_kept_cosine_qk1", "layer-2 QK gradient: cosine of the kept "
                                      "(routing) term with the full gradient", "near 1, the theory (>= 0.9)", 0.9)),
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
    from compose_lens.markup import html_table

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


ANALYSES: tuple[Analysis, ...] = (PROBES, QK, ENTROPY, FOURIER, SAME_MLP, DLA, ABLATION, PATCHING, CIRCUIT, VARIANT,
                                  GRADIENT, DAS, HEAD_PATCHING, PATH_PATCHING)
