"""The offline HTML report of a run, or of one model: one file that opens anywhere, with no network.

``compose-lens report RUN_DIR`` writes ``RUN_DIR/report.html`` (:func:`build_report`; one model:
:func:`build_model_report`). What the sections read is loaded once (:class:`ReportInputs`); each section
takes those inputs and returns HTML. The report's own sections: the configuration
(:func:`configuration_section`; for a folder of the study's checkpoints, which records none,
:func:`study_configuration`), the study's numbers beside this run's (:func:`results_section`: the
exhaustive accuracies, the onsets of the three phases, the nine pools) and, with ``report X --compare Y``,
last, :func:`comparison_section`. Every other section is a registered analysis's
(:func:`registered_section`), in the order :data:`PAGE` gives: a model analysis's files are read from
``RUN_DIR/results/<name>/`` where made with the same settings, seed and configuration (``compose-lens
analyze RUN --out RUN/results`` writes them), and only what is missing is computed and saved there; a run
analysis reads the checkpoints through a :class:`~compose_lens.report.context.RunContext`.

Every image is a base64 ``data:`` URI and every script inline (:mod:`compose_lens.report.page`); the figures
are also saved as PNG + CSV under ``RUN_DIR/figures/``. A failing section says so on the page.
"""

from __future__ import annotations

import contextlib
import datetime
import functools
import html
import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

from compose_lens.training import runs
from compose_lens.views.drawing import layer_name
from compose_lens.core import study
from compose_lens.training.outcome import trajectory_outcome
from compose_lens.training.phases import phase_line
from compose_lens.core.errors import ComposeLensError
from compose_lens.core.config import RunConfig
from compose_lens.data.sampler import absent_pools, example_sequences, make_pools
from compose_lens.data.split import Split
from compose_lens.training.evaluate import exhaustive_accuracies, pool_accuracies
from compose_lens.core.provenance import VERSION, code_version
from compose_lens.data.safety import lock_run, staged_companion, write_text_atomic
from compose_lens.core.stats import rate_record
from compose_lens import registry
from compose_lens.report import compare
from compose_lens.report import context
from compose_lens.core.markup import html_table, render
from compose_lens.report.page import Report
from compose_lens.core.progress import phases
from compose_lens.training.subject import Subject, final_model

STUDY = {**study.CLAIMS, **study.PHASES}  # what the study reports, beside each row of the results table


@dataclass
class ReportInputs:
    """What the sections of one report read: loaded once by :func:`load_inputs`."""

    run_dir: Path
    subject: Subject  # the final model (or the model given), its config and split
    which: str  # which model of the run: "final", or the checkpoint used
    results: dict | None  # results.json, None if the run has not finished
    texts: list[str]  # the example sequences
    report: Report  # where figures go (embedded and saved)
    context: context.Context | None = None  # the final model as the registered analyses read it
    run: context.RunContext | None = None  # the run's checkpoints as its analyses read them (None: one model)
    found: dict[str, registry.Result] = field(default_factory=dict)  # read before the sections: the dynamics
    results_dir: Path | None = None  # where their files are read from and kept: results_dir/<name>/
    compare_with: Any = None  # a Subject to compare this model with (comparison_section), or None
    compare_label: str = ""  # its name on the page (default: its source)
    compare_options: dict | None = None  # compose_lens.report.compare.compare's options (default: the command's)
    examples: tuple[str, ...] = ()  # the sequences the reader gave (none: ``texts`` are the split's examples)
    progress: bool = True  # a phase line per section on a terminal (compose_lens.core.progress.phases)

    table = property(lambda self: self.found["dynamics"].tables["dynamics"])  # one row per checkpoint
    phases_doc = property(lambda self: self.found["dynamics"].documents["phases"])  # the rule, timing and "phases"
    phases = property(lambda self: self.phases_doc["phases"])

    @property
    def outcome(self) -> dict:
        """generalised / stalled / learning: from results.json, else from the dynamics table."""
        if self.results and "outcome" in self.results:
            return self.results["outcome"]
        return trajectory_outcome(self.table.to_dict("records"), self.run_dir, self.subject.config)


def load_inputs(run_dir: Path, report: Report, results_dir: Path, split_file=None, examples: list[str] | None = None,
                stride: int = 1, progress: bool = True, recompute: bool = False, seed: int = 0,
                device: str = "cpu") -> ReportInputs:
    """Load everything the sections read: the dynamics saved in ``results_dir`` (extended, or computed there,
    where they lack a checkpoint asked for; with ``recompute``, computed), the final model on ``device``; the
    analyses' sequences drawn with ``seed``."""
    run = context.RunContext(run_dir, split_file, progress=progress, previous=results_dir, device=device)
    dynamics = context.obtain(registry.DYNAMICS, run, results_dir, {"stride": stride, "update": not recompute})
    loaded, which = final_model(run_dir, split_file, device)
    return ReportInputs(run_dir=run_dir, subject=loaded, which=which,
                        results=runs.read_results(run_dir), texts=examples or example_sequences(loaded.split),
                        report=report, examples=tuple(examples or ()), context=context.Context(loaded, seed=seed),
                        run=run, found={"dynamics": dynamics}, results_dir=results_dir, progress=progress)


def learned_banner(inp: ReportInputs) -> str:
    """What the model has learned (:func:`compose_lens.training.evaluate.learned`) and which components play the
    roles, first on the page: boxed as a warning where the model does not bind (its heads are no binder)."""
    location = inp.context.plan[0]
    knows = location.learned
    if knows is None:
        return ""
    style = ("border:2px solid #b2182b;padding:0.5em;background:#fdecea" if not knows.binds
             else "border:1px solid #4d4d4d;padding:0.5em")
    return render("learned.html", style=style, learned=knows.line(), roles=[role.line() for role in location.roles()])


def stall_banner(found: dict) -> str:
    """A boxed warning for a stalled run (empty otherwise), atop the page and the results."""
    if found.get("outcome") != "stalled":
        return ""
    return ('<p class="warning" style="border:2px solid #b2182b;padding:0.5em;background:#fdecea">'
            "<b>This run stalled.</b> It learned addition but formed no layer-2 routing within its budget, "
            f"so it cannot use variables ({html.escape(str(found.get('why', '')))}); the analyses below describe "
            "a model without the study's circuit. Train another seed, or with <code>--set remedy=lr_x3</code> "
            "(README, 'When a run stalls').</p>")


# -- the sections ----------------------------------------------------------------------------------


UNKNOWN = "not recorded in the folder"


def study_configuration(run_dir: Path, config: RunConfig, split: Split) -> list[list[str]]:
    """(setting, value, where it comes from) for a folder of the study's checkpoints: what its
    ``split.json`` says, what the weights' shapes say (checked when the model was loaded), the
    checkpoint steps found, and "unknown" for everything else (compose-lens's defaults, such as
    its 30,000 steps on cpu, are not the study's)."""
    split_file = run_dir / runs.SPLIT_FILE
    recorded = json.loads(split_file.read_text()) if split_file.exists() else {}
    task, model = config.task, config.model
    where_split = "split.json" if recorded else "unknown: no split.json (paper default assumed)"
    rows = [["task: modulus p", task.modulus, where_split],
            ["task: variables", f"{task.n_vars} ({', '.join(task.variable_names)})", where_split],
            ["task: f (share of addition pairs in training)", f"{task.f:g}", where_split],
            ["task: held-out pairs", len(split.heldout_pairs), where_split],
            ["task: variables never the left operand in training", ", ".join(task.left_forbidden), where_split],
            ["task: variables never the right operand in training", ", ".join(task.right_forbidden), where_split]]
    for key, label in (("r", "task: r"), ("seed", "task: split seed"), ("max_assignments", "task: max assignments")):
        rows.append([label, recorded[key], "split.json"] if key in recorded else [label, "unknown", UNKNOWN])
    shapes = "weight shapes (checked when loaded)"
    rows += [["model: layers", model.n_layers, shapes], ["model: d_model", model.d_model, shapes],
             ["model: heads per layer x d_head", f"{model.n_heads} x {model.d_head}", shapes],
             ["model: d_mlp", model.d_mlp, shapes],
             ["model: MLP in layers", ", ".join(layer_name(b) for b in model.mlp_blocks),
              "weights (the other MLPs are all zero)"],
             ["model: context positions", model.n_ctx, shapes],
             ["model: vocabulary in / out", f"{model.d_vocab} / {model.d_vocab_out}", shapes],
             ["model: normalisation", "none", "weights (no LayerNorm parameters)"],
             ["model: biases", "none trained (all zero)", "weights"],
             ["model: activation", "unknown", "not in the weights (the analyses assume ReLU, as the study's)"]]
    steps = sorted(c.step for c in runs.find_checkpoints(run_dir)[0]) if any(run_dir.glob("step_*.pth")) else []
    found = (f"{len(steps)} checkpoints, steps {steps[0]} to {steps[-1]}" if steps else "no step_N.pth")
    final = " and final.pth (its step is not in its name)" if (run_dir / runs.STUDY_FINAL).exists() else ""
    rows.append(["training: steps", "unknown", f"{found}{final}"])
    return rows + [[f"training: {label}", "unknown", UNKNOWN] for label in (
        "batch size", "learning rate", "weight decay", "optimiser betas", "seed", "device", "precision")]


def configuration_section(inp: ReportInputs) -> str:
    head = (f"<p>Run <code>{html.escape(str(inp.run_dir))}</code>; model evaluated: {html.escape(inp.which)}; "
            f"split: {len(inp.subject.split.train_pairs)} training pairs, {len(inp.subject.split.heldout_pairs)} "
            "held out.</p>")
    run_dir = inp.run_dir
    if not (run_dir / runs.CONFIG_FILE).exists() and ((run_dir / runs.STUDY_FINAL).exists()
                                                      or any(run_dir.glob("step_*.pth"))):  # the study's .pth files
        readme = run_dir / "README.md"
        note = ("" if not readme.exists() else
                "<details><summary>What the folder's README.md says</summary><pre>"
                + html.escape(readme.read_text(encoding="utf-8", errors="replace")[:20000]) + "</pre></details>")
        return (head + "<p>A folder of the study's checkpoints: it records no configuration file, so this "
                "table shows only what its files say; the rest is <b>unknown</b> (not compose-lens's "
                "defaults).</p>"
                + html_table(study_configuration(run_dir, inp.subject.config, inp.subject.split),
                             ["setting", "value", "where it comes from"]) + note)
    tables = "".join(f"<div>{html_table([[k, json.dumps(v)] for k, v in values.items()], [section, 'value'])}</div>"
                     for section, values in inp.subject.config.to_dict().items())
    return head + f'<div style="display:flex;gap:2em;flex-wrap:wrap;align-items:flex-start">{tables}</div>'


def results_section(inp: ReportInputs) -> str:
    phases = inp.phases
    exhaustive = inp.results["exhaustive"] if inp.results else exhaustive_accuracies(inp.subject)
    ex2, ex0 = exhaustive["two_var_union"], exhaustive["zero_var_heldout"]
    rows = [
        ["unseen 2-var sequences (2-var union, exhaustive)", STUDY["two_var_union"],
         f"{ex2['accuracy']:.2%} ({ex2['correct']}/{ex2['total']})"],
        ["0-var held-out pairs (exhaustive)", STUDY["zero_var_heldout"],
         f"{ex0['accuracy']:.2%} ({ex0['correct']}/{ex0['total']})"],
    ]
    for name in ("addition", "assignment", "refinement"):
        rows.append([f"phase onset: {phases[name]['description']}", STUDY[name], phase_line(phases[name])])
    found = inp.outcome
    rows.append(["outcome (stall detector)", "generalised", f"{found['outcome']}: {found['why']}"])
    source = "results.json" if inp.results else "computed now on the last checkpoint"
    thresholds = "; ".join(f"{k} {v['metric']} &ge; {v['threshold']} (margin {v['margin']})"
                           for k, v in phases.items())
    return (stall_banner(found) + html_table(rows, ["measure", "study", "this run"])
            + f"<p class=\"note\">Exhaustive accuracies from {source}. Phase rule: "
              f"{html.escape(inp.phases_doc['rule'])}. Thresholds: {thresholds}.</p>"
            + "<h3>Pool accuracies of the final model</h3>" + pool_accuracy_table(inp.subject))


def pool_accuracy_table(subject: Subject) -> str:
    """The nine pools' accuracies as ``evaluate`` prints them: each with its 95 % Wilson interval and its
    count, correct of sequences (``config.train.pool_size`` each); a pool the split cannot draw says why."""
    model, config, split = subject.model, subject.config, subject.split
    batches = make_pools(split, config.train.pool_size)
    records = {name: rate_record(round(accuracy * len(batches[name])), len(batches[name]))
               for name, accuracy in pool_accuracies(model, config, batches).items()}
    rows = [[name, f"{r['accuracy']:.4f} [{r['low']:.4f}, {r['high']:.4f}]", f"{r['correct']} / {r['n']}"]
            for name, r in records.items()]
    rows += [[name, f"absent: {why}", ""] for name, why in absent_pools(split).items()]  # a split holding nothing out
    return html_table(rows, ["pool", "accuracy [95 % Wilson interval]", "correct / sequences"])


def comparison_section(inp: ReportInputs) -> str:
    """This model (A) beside ``inp.compare_with`` (B): the tables of ``compare.html``, its files kept in
    ``results/compare/``."""
    a, b = inp.context.loaded, inp.compare_with
    table = compare.compare(a, b, **(inp.compare_options or {}))
    compare.write(table, a, b, inp.results_dir / "compare")
    label = f"<code>{html.escape(inp.compare_label or b.source)}</code>"
    if inp.compare_label and inp.compare_label != b.source:
        label += f" ({html.escape(b.source)})"
    return (f"<p><b>A</b>: this model, <code>{html.escape(a.source)}</code>; <b>B</b>: {label}. The same rows as <code>compose-lens compare A B</code>, read on the same "
            f"prompts ({html.escape(compare.read_on(table))}); B - A is the other model minus this one. "
            f"{compare.HOW_READ} Saved in <code>results/compare/</code> (compare.csv, compare.json, "
            f"compare.html).</p>" + compare.html_tables(table, heading="h3"))


def registered_section(analysis: registry.Analysis) -> Callable[[ReportInputs], str]:
    """The report section of a registered analysis, laid out by its ``section`` from its result with its
    ``report_settings`` (None: no result): :attr:`ReportInputs.found`'s, else a model analysis's obtained in
    ``results_dir/<name>/``, or a run analysis's computed now over the run's checkpoints."""
    def section(inp: ReportInputs) -> str:
        asked = analysis.report_settings(inp) if analysis.report_settings else {}
        settings = analysis.with_settings(asked)
        result = None if asked is None else inp.found.get(analysis.name) or (
            context.obtain(analysis, inp.context, inp.results_dir / analysis.name, settings) if analysis.of == "model"
            else context.compute(analysis, inp.run, settings))
        return analysis.section(inp, result, settings)

    section.__name__ = f"{analysis.name}_section"
    section.reads = analysis.reads  # build_report leaves out a section with nothing to read in this model
    return section


# The one list that orders the page: the anchors of the report's own sections and of the registered analyses'
# (``anchor``, else the name); a registered section not named here comes after, in the registry's order.
PAGE = ("config", "results", "dynamics", "circuit", "variant", "attention", "qk", "attention_entropy", "jump",
        "fourier", "dla", "patching", "ablation", "same-mlp", "circuit-discovery", "modularity", "gradient")


def page(own: dict[str, tuple[str, Callable[[ReportInputs], str]]], run: bool = True
         ) -> tuple[tuple[str, str, Callable], ...]:
    """(anchor, title, section) in :data:`PAGE`'s order: the report's ``own`` sections (anchor -> (title,
    section)) and each registered analysis's (:func:`registered_section`; of a run's checkpoints too with ``run``)."""
    registered = {analysis.anchor or analysis.name: (analysis.title, registered_section(analysis))
                  for analysis in registry.ANALYSES if analysis.section is not None and (run or analysis.of == "model")}
    named = {**own, **registered}
    order = (*PAGE, *(anchor for anchor in registered if anchor not in PAGE))
    return tuple((anchor, *named[anchor]) for anchor in order if anchor in named)


def sections() -> tuple[tuple[str, str, Callable[[ReportInputs], str]], ...]:
    """The sections of a run's report, in page order."""
    return page({"config": ("Configuration", configuration_section),
                 "results": ("Results: the study and this run", results_section)})


# -- one model: the report of a model without a training run ------------------------------------


def model_configuration_section(inp: ReportInputs) -> str:
    subject = inp.context.loaded
    declared = subject.declaration
    head = (f"<p>Model <code>{html.escape(subject.source)}</code>; split: {len(inp.subject.split.train_pairs)} training "
            f"pairs, {len(inp.subject.split.heldout_pairs)} held out. One model, no training run: the sections that read "
            f"checkpoints (the dynamics, the phases, the early jump) are left out.</p>")
    rows = [] if declared is None else [[k, json.dumps(v) if len(json.dumps(v)) < 120 else f"({len(v)} entries)"]
                                        for k, v in declared.to_dict().items()]
    task = html_table(rows, ["task, as declared", "value"]) if rows else ""
    recorded = inp.subject.config.to_dict()  # a model trained elsewhere: where it came from, no training recipe
    model = html_table([[k, json.dumps(v)] for k, v in recorded["model"].items()],
                       ["model, in the study's coordinates", "value"])
    origin = "" if "origin" not in recorded else html_table(
        [[k, json.dumps(v)] for k, v in recorded["origin"].items() if k != "declaration"], ["origin", "value"])
    return head + f'<div style="display:flex;gap:2em;flex-wrap:wrap;align-items:flex-start">{task}{model}{origin}</div>'


def model_results_section(inp: ReportInputs) -> str:
    exhaustive = exhaustive_accuracies(inp.subject)
    rows = [[name.replace("_", " "), STUDY.get(name, ""), f"{v['accuracy']:.2%} ({v['correct']}/{v['total']})"
             if v["total"] else "absent: the split holds out nothing it would test"] for name, v in exhaustive.items()]
    return (html_table(rows, ["exhaustive set", "study", "this model"])
            + "<h3>Pool accuracies</h3>" + pool_accuracy_table(inp.subject))


def model_sections() -> tuple[tuple[str, str, Callable[[ReportInputs], str]], ...]:
    """The sections of one model's report, in page order (none that reads checkpoints)."""
    return page({"config": ("Configuration", model_configuration_section), "results": ("Results", model_results_section)},
                run=False)


def is_run_source(spec: str | Path) -> bool:
    """Does ``spec`` name a training run (a run directory with checkpoints, or a folder of the
    study's ``step_N.pth``), whose report has the dynamics, rather than one model?"""
    path = Path(str(spec))
    return path.is_dir() and ((path / runs.CHECKPOINTS_DIR).is_dir() or any(path.glob("step_*.pth")))


def build_model_report(subject, out: str | Path, examples: list[str] | None = None, compare_with=None,
                       compare_label: str = "", compare_options: dict | None = None, seed: int = 0,
                       progress: bool = True) -> tuple[Path, list[str]]:
    """Write the report of one model (a :class:`~compose_lens.training.subject.Subject`) to ``out``: every section
    that reads one model, its figures and files in ``OUT_files/`` beside the page, written through a stage.
    ``compare_with`` (a Subject of the same task and split, named ``compare_label``): a last section compares
    the two (``compare_options``: those of :func:`compose_lens.report.compare.compare`). ``seed``: of the
    sequences the analyses draw; ``progress``: a phase line per section on a terminal."""
    out = Path(out)
    with staged_companion(out.parent / (out.stem + "_files"), "report", keep=("results",)) as files_dir:
        report = Report(files_dir / "figures")
        inputs = ReportInputs(run_dir=Path(subject.source), subject=subject, which="the model",
                              results=None, texts=examples or example_sequences(subject.split), report=report,
                              examples=tuple(examples or ()),
                              context=context.Context(subject, seed=seed), results_dir=files_dir / "results",
                              compare_with=compare_with, compare_label=compare_label,
                              compare_options=compare_options, progress=progress)
        _write_page(inputs, model_sections(), out,
                    f"compose-lens report: {Path(subject.source).name}", learned_banner(inputs))
    return out, report.problems


# -- the page --------------------------------------------------------------------------------------


def _write_page(inputs: ReportInputs, sections, out: Path, title: str, banner: str) -> None:
    """Make each section that reads this model (a failing one says so on the page) and write the page;
    with ``inputs.compare_with``, the comparison last."""
    report = inputs.report
    if inputs.compare_with is not None:
        name = inputs.compare_label or inputs.compare_with.source
        sections = (*sections, ("compare", f"Compared with {name}", comparison_section))
    chosen = [(anchor, name, section) for anchor, name, section in sections
              if getattr(section, "reads", None) is None or section.reads(inputs.subject.config)]
    with inputs.context, phases("report", inputs.progress) as phase:  # the analyses share one model's grids
        for n, (anchor, name, section) in enumerate(chosen, 1):
            phase(f"section {n}/{len(chosen)}: {name}")
            report.section(anchor, name, functools.partial(section, inputs))
        phase("writing the page")
        stamp = datetime.datetime.now().strftime("%Y-%m-%d %H:%M")
        subtitle = (f"compose-lens {VERSION}, code {html.escape(code_version())}, written {stamp}. "
                    f"Reproducing &ldquo;Assign and Add&rdquo; (arXiv 2605.31497). Everything on this page is "
                    f"embedded: it works offline.")
        out.parent.mkdir(parents=True, exist_ok=True)
        write_text_atomic(out, report.render(title, subtitle, banner))


def saved_dynamics_of(run_dir: Path, results_dir: Path, split_file=None) -> bool:
    """Whether the dynamics saved in ``results_dir`` beside a page written outside the run (``X_files/results``)
    are ``run_dir``'s (that folder outlives its page: ``report RUN2 --out X`` must not show RUN's curves).
    Anything unreadable: not."""
    try:
        doc = json.loads((results_dir / runs.PHASES_FILE).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return False
    return runs.dynamics_of_run(doc, run_dir, split_file)


def build_report(run_dir: str | Path, out: str | Path | None = None, split_file=None, examples: list[str] | None = None,
                 stride: int = 1, progress: bool = True, recompute: bool = False, compare_with=None,
                 compare_label: str = "", compare_options: dict | None = None, seed: int = 0,
                 device: str = "cpu") -> tuple[Path, list[str]]:
    """Write the report of ``run_dir`` to ``out`` (default ``run_dir/report.html``); its final model and
    checkpoints run on ``device``, its analyses draw their sequences with ``seed``.

    Returns the page's path and the sections that could not be made (each also explained on the page). A
    page outside the run keeps its figures and results in ``X_files/`` beside it. Everything is written
    through a stage (in the run too, which is locked meanwhile): a call that fails leaves no part of it.
    ``compare_with``, ``compare_label``, ``compare_options``: as :func:`build_model_report`'s, the run's
    final model being A.
    """
    run_dir = Path(run_dir)
    if not run_dir.is_dir():
        raise ComposeLensError(f"{run_dir}: not a run directory")
    writable = out is None or Path(out).parent.resolve() == run_dir.resolve()
    out = Path(out) if out else run_dir / "report.html"
    folder = run_dir if writable else out.parent / (out.stem + "_files")
    with lock_run(run_dir, "report") if writable else contextlib.nullcontext(), \
            staged_companion(folder, "report", keep=("results",)) as files_dir:
        report = Report(files_dir / "figures")
        recompute = recompute or not (writable or saved_dynamics_of(run_dir, files_dir / "results", split_file))
        inputs = load_inputs(run_dir, report, files_dir / "results", split_file, examples, stride, progress,
                             recompute, seed, device)
        inputs.compare_with, inputs.compare_label, inputs.compare_options = compare_with, compare_label, compare_options
        try:
            banner = stall_banner(inputs.outcome)
        except Exception:  # the results section says what went wrong
            banner = ""
        banner += learned_banner(inputs)
        _write_page(inputs, sections(), out, f"compose-lens report: {run_dir.name}", banner)
        if report.problems:
            (files_dir / "report_problems.txt").write_text("\n".join(report.problems) + "\n")
    return out, report.problems
