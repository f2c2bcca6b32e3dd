"""The ``same_mlp`` analysis, whole in this folder: does one MLP add constants and variables?

``comparisons.py`` holds the numbers (three tests that can fail, their verdict, and the correlational cosines;
modularity reads its report), ``figure.py`` the figures, ``test_same_mlp.py`` and ``test_same_mlp_ceilings.py``
the tests; this module says how ``compose-lens same-mlp``, ``analyze``, the report and the API run it: its
command, memory guard, verdict lines and report section.
"""

from __future__ import annotations

from compose_lens.registry.analysis import Analysis, Option, Result


def _same_mlp(ctx: Context, settings: dict) -> Result:
    from compose_lens.registry.same_mlp import comparisons
    from compose_lens.core.files import json_safe

    tables, report = comparisons.same_mlp_run(ctx.loaded, ctx.seed, n=settings["n"])
    if ctx.split.prompts is not None:  # said, not silent: the tests' prompt sets are not the file's
        report["prompt_sets"] = (f"rendered from the declared distribution, not from {ctx.split.prompts.source}: "
                                 f"the tests need a constant and a variable prompt of each pair, made to order")
    trimmed = {k: v for k, v in report.items() if k not in ("tables", "config", "code_version", "seed")}
    # summary.json keeps the verdict, same_mlp.json every test, the CSVs the tables (as many as ran)
    return Result(tables={f"same_mlp_{name}": table for name, table in tables.items()},
                  documents={"same_mlp": json_safe(report)}, facts={"same_mlp": json_safe(trimmed)})


def _same_mlp_figures(ctx: Context, result: Result, settings: dict) -> list:
    """The tests' figure, where they ran (not where a role is not located or the model does not answer
    variable prompts: then only the competence table is there)."""
    from compose_lens.registry.same_mlp.figure import same_mlp_figure

    ran = "same_mlp_interchange" in result.tables
    return [("same_mlp", same_mlp_figure, (result.documents["same_mlp"],), 110)] if ran else []


def _same_mlp_lines(result: Result) -> list[str]:
    from compose_lens.registry.same_mlp import comparisons

    report = result.documents["same_mlp"]
    table = comparisons.verdict_table(report).to_string(index=False, float_format=lambda v: f"{v:.3f}")
    because = [] if report["verdict"] == "supported" else [f"  because: {report['verdict_reason']}"]
    sets = [f"  prompt sets: {report['prompt_sets']}"] if report.get("prompt_sets") else []
    return [f"tests read: {report['components']['how']}", table,
            f"verdict: {report['verdict']}  (thresholds: see same_mlp.json; {report['n_prompts']} prompts per set)",
            *because, *sets]


def _same_mlp_guard(settings: dict, config) -> None:
    """The layout the tests read (one line, before minutes of work), then six prompt sets of ``n``, and as
    many again for the damage profiles and the probes."""
    from compose_lens.registry.same_mlp.comparisons import check_layout
    from compose_lens.data.safety import check_sizes, kept_activation_bytes

    check_layout(config)
    check_sizes(config, {f"--n {settings['n']}": (settings["n"], 12)}, kept_activation_bytes(config))


def _same_mlp_section(inp, result: Result, settings: dict) -> str:
    """The causal tests that can fail (operand interchange, feature transfer, representation
    transfer) with their controls and verdict, then the correlational cosines."""
    import html

    from compose_lens.registry.same_mlp import comparisons
    from compose_lens.core.markup import html_table
    from compose_lens.registry.same_mlp.figure import cosine_histograms_figure

    report = result.documents["same_mlp"]
    table = comparisons.verdict_table(report)
    columns = [c for c in ("test", "status", "effect", "ci_low", "ci_high", "condition", "reference") if c in table]
    groups = comparisons.cosine_groups(inp.subject)
    return (f"<p><b>Verdict:</b> {html.escape(str(report['verdict']))} (supported only if every test "
            f"passes; each test's rule and thresholds are in <code>compose-lens same-mlp</code>'s "
            f"same_mlp.json; {settings['n']} prompts per set)</p>"
            + html_table(table[columns].values.tolist(), columns)
            + (inp.report.figure(result.figure("same_mlp"), "same_mlp",
                                 "Operand interchange per condition (black tick: what the interchange would "
                                 "give if constants and variables did not share the MLP's representation; "
                                 "dotted: chance), constant against variable damage profiles, and the probe "
                                 "and subspace transfer, with the controls. Bars: 95 % intervals.")
               if "same_mlp_interchange" in result.tables else
               f'<p class="missing">No test ran, so there is no figure of them: '
               f'{html.escape(str(report["verdict_reason"]))}.</p>')
            + inp.report.figure(cosine_histograms_figure(groups), "cosine_histograms",
                                "Correlational only: cosine similarity of the MLP2 input, constant "
                                "against variable operand, one panel per side of the variable; dashed: "
                                "each group's mean."))


SAME_MLP = Analysis(
    name="same_mlp", title="Same MLP for constants and variables", compute=_same_mlp, settings={"n": 400},
    module="compose_lens.registry.same_mlp.comparisons", documents=("same_mlp",),
    tables=tuple(f"same_mlp_{name}" for name in ("interchange", "damage_profiles", "feature_transfer", "probe",
                                                 "competence")),
    figures=("same_mlp", "cosine_histograms"), draw=_same_mlp_figures, section=_same_mlp_section, anchor="same-mlp",
    command="same-mlp", help="does MLP2 add variables with the features it uses for constants? three tests that "
                             "can fail, and a verdict",
    options=(Option("--n", "n", "prompts per prompt set", minimum=20),), guard=_same_mlp_guard,
    describe=_same_mlp_lines, exports=("same_mlp_report",))
