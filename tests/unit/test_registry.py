"""The analysis registry: one declaration reaches analyze, the report, the command line and the API;
the per-model context builds the constant-operand grid once; the report reads saved results made
with the same settings and computes the rest."""

from __future__ import annotations

import contextlib
import dataclasses
import json

import pytest

import compose_lens
from compose_lens import registry
from compose_lens.analysis import fourier
from compose_lens.registry.same_mlp import comparisons as same_mlp
from compose_lens.model import tl
from compose_lens.report import context
from compose_lens.report.context import write_analysis
from compose_lens.training.subject import Subject


@pytest.fixture
def loaded(tiny_config, tiny_split) -> Subject:
    return Subject(tl.boot(tiny_config.model), tiny_config, tiny_split, "tiny")


def _count_constant_grids(monkeypatch) -> list:
    built = []
    real = fourier._operand_grid

    def counting(subject, operands="constant", *args, **kwargs):
        if operands == "constant":
            built.append(kwargs.get("layer"))
        return real(subject, operands, *args, **kwargs)

    monkeypatch.setattr(fourier, "_operand_grid", counting)
    return built


def test_analyze_builds_the_constant_grid_once_and_each_analysis_without_the_context_would_build_its_own(
        loaded, tmp_path, monkeypatch):
    monkeypatch.setattr(same_mlp, "same_mlp_report", lambda *a, **k: {"verdict": "stand-in"})  # its own tests
    monkeypatch.setattr(same_mlp, "same_mlp_tables", lambda *a, **k: {})
    built = _count_constant_grids(monkeypatch)
    write_analysis(loaded, tmp_path / "shared", causal=True)
    assert len(built) == 1, built
    assert {p.parent.name for p in (tmp_path / "shared").glob("*/*.csv")} >= {"probes", "fourier", "dla", "ablation"}
    built.clear()
    monkeypatch.setattr(fourier, "shared_grids", contextlib.nullcontext)  # what each analysis did alone
    write_analysis(loaded, tmp_path / "alone", causal=True)
    assert len(built) >= 3, built  # the summary, the Fourier tables and the ablation's frequency groups


def test_the_report_reads_a_saved_result_made_alike_and_recomputes_otherwise(loaded, tmp_path):
    calls = []

    def counted(ctx, settings):
        calls.append(dict(settings))
        return registry.DLA.compute(ctx, settings)

    dla = dataclasses.replace(registry.DLA, compute=counted)
    with context.Context(loaded) as ctx:
        first = context.obtain(dla, ctx, tmp_path / "dla", {"n": 45})
        again = context.obtain(dla, ctx, tmp_path / "dla", {"n": 45})
        assert len(calls) == 1  # read back, not computed
        assert again.tables["logit_attribution"]["share"].round(6).tolist() == \
            first.tables["logit_attribution"]["share"].round(6).tolist()
        context.obtain(dla, ctx, tmp_path / "dla", {"n": 54})  # other settings: computed
        assert [c["n"] for c in calls] == [45, 54]
    with context.Context(loaded, seed=1) as other:  # another seed: computed
        context.obtain(dla, other, tmp_path / "dla", {"n": 54})
    assert len(calls) == 3
    record = json.loads((tmp_path / "dla" / "logit_attribution.provenance.json").read_text())
    assert record["settings"] == {"n": 54} and record["seed"] == 1


def test_an_unknown_setting_is_refused_in_one_line():
    with pytest.raises(compose_lens.ComposeLensError, match="no setting"):
        registry.DLA.with_settings({"n_pairs": 3})


NEW_MODULE = '''"""A declaration module written at test time: nothing else names it."""
from compose_lens.registry.analysis import Analysis, Finding, Option, Result


def width_of(config):
    """The model's width."""
    return config.model.d_model


def _compute(ctx, settings):
    import pandas as pd

    return Result(tables={"widths": pd.DataFrame({"d_model": [width_of(ctx.config)] * settings["k"]})},
                  facts={"width_checked": True})


def widths_figure(table):
    from matplotlib.figure import Figure

    figure = Figure(figsize=(2, 2))
    figure.add_subplot().bar([0], [table["d_model"].iloc[0]])
    return figure, table


def _figures(ctx, result, settings):
    return [("widths", widths_figure, (result.tables["widths"],), 40)]


WIDTH = Analysis(name="width", title="The width", compute=_compute, settings={"k": 2}, tables=("widths",),
                 figures=("widths",), draw=_figures, module="compose_lens.registry.width", exports=("width_of",),
                 section=lambda inp, result, settings: "<p>width</p>",
                 findings=(Finding("width_checked", "the width was read", "True"),),
                 command="width", help="the width", options=(Option("--k", "k", "rows"),))
'''


def test_every_analysis_is_one_folder_and_a_module_beside_them_declares_nothing(tmp_path, monkeypatch):
    """Each declaration sits in a folder of the registry (numbers, figures and tests beside it), and the scan
    reads folders only: a declaration in a plain module of the package is not an analysis."""
    import pkgutil
    from pathlib import Path

    home = Path(registry.__file__).parent
    assert [m.name for m in pkgutil.iter_modules(registry.__path__) if not m.ispkg] == ["analysis"]
    for analysis in registry.ANALYSES:
        folder = analysis.compute.__module__.split(".")[2]
        assert (home / folder / "__init__.py").is_file(), analysis.name
    (tmp_path / "loose.py").write_text("from compose_lens.registry.analysis import Analysis, Result\n"
                                       "LOOSE = Analysis(name='loose', title='Loose', compute=lambda c, s: Result())\n")
    monkeypatch.setattr(registry, "__path__", [*registry.__path__, str(tmp_path)])
    assert "loose" not in [a.name for a in registry.load()]


def test_a_new_analysis_folder_reaches_analyze_the_report_the_cli_the_run_layout_the_api_and_its_page(
        loaded, tmp_path, monkeypatch, request):
    """A folder added to the registry package, and nothing else edited: the registry's scan finds it
    (:func:`compose_lens.registry.load`, what the package runs at import), and analyze's folders, the
    report's page, its command, the findings, the run layout, the public names and the API page take it up."""
    import sys

    from compose_lens import report

    from compose_lens.core import outputs

    from compose_lens.training import runs

    more = tmp_path / "more"
    (more / "width").mkdir(parents=True)  # an analysis folder, as registry/answer_lens/ is one
    (more / "width" / "__init__.py").write_text(NEW_MODULE)
    request.addfinalizer(lambda: sys.modules.pop("compose_lens.registry.width", None))
    monkeypatch.setattr(registry, "__path__", [*registry.__path__, str(more)])
    monkeypatch.setitem(outputs.ANALYSIS_FILES, "width", None)  # undone: the layout forgets it again
    monkeypatch.setattr(registry, "WIDTH", None, raising=False)
    monkeypatch.setattr(registry, "ANALYSES", registry.load())
    new = registry.by_name(registry.ANALYSES, "width")
    assert registry.WIDTH is new and registry.ANALYSES[-1] is new  # not in ORDER: analyze runs it last
    assert [a.name for a in registry.ANALYSES][:len(registry.ORDER)] == list(registry.ORDER)  # then the rest, by name

    monkeypatch.setattr(same_mlp, "same_mlp_report", lambda *a, **k: {"verdict": "stand-in"})
    monkeypatch.setattr(same_mlp, "same_mlp_tables", lambda *a, **k: {})
    summary = write_analysis(loaded, tmp_path / "a", causal=False)
    assert summary["width_checked"] is True and (tmp_path / "a" / "width" / "widths.csv").exists()
    assert (tmp_path / "a" / "width" / "figures" / "widths.png").exists()

    for page in (report.sections(), report.model_sections()):  # not in PAGE: the last section
        assert page[-1][:2] == ("width", "The width") and page[-1][2].__name__ == "width_section"

    from compose_lens.cli import analysis, build_parser, main

    args = build_parser().parse_args(["width", "m", "--out", "o"])
    assert (args.analysis, args.k) == ("width", 2)
    assert ("width_checked", "the width was read", "True") in tuple(
        (f.key, f.what, f.predicts) for a in registry.ANALYSES for f in a.findings)
    assert analysis.FINDINGS[0].key == "prev_token_attention_score"  # the module's table, built at import
    assert main(["width", "paper", "--out", str(tmp_path / "w"), "--k", "3", "--quiet"]) == 0
    assert len((tmp_path / "w" / "widths.csv").read_text().splitlines()) == 4

    run = tmp_path / "run"  # the report keeps its files in RUN/results/width/: train --overwrite owns them
    (run / "results" / "width" / "figures").mkdir(parents=True)
    (run / "figures").mkdir()
    for name in ("results/width/widths.csv", "results/width/widths.provenance.json",
                 "results/width/figures/widths.png", "figures/widths.png"):
        (run / name).write_text("")
    assert runs.foreign_in_run(run) is None

    assert compose_lens._registered()["width_of"] == "compose_lens.registry.width"
    assert compose_lens.__getattr__("width_of")(loaded.config) == loaded.config.model.d_model
    from tests.unit.test_api_page import page_entries

    assert page_entries()["width_of"] == "compose_lens.registry.width.width_of"


def test_the_registered_names_are_the_public_api_and_dla_has_its_command():
    from compose_lens.cli import build_parser

    assert {"logit_attribution", "logit_lens", "patching_table", "ablation_table"} <= set(compose_lens.__all__)
    args = build_parser().parse_args(["dla", "paper", "--out", "o"])
    assert args.n == registry.DLA.settings["n"] == 600
    from compose_lens.report import sections

    anchors = [a for a, _, _ in sections()]
    assert anchors.index("fourier") < anchors.index("dla") < anchors.index("patching") < anchors.index("same-mlp")


@pytest.mark.parametrize("command, name, options, settings", [
    ("patch", "patching", ["--n-pairs", "12", "--by", "position"], {"n_pairs": 12, "by": "position"}),
    ("ablate", "ablation", ["--pool-size", "8"], {"pool_size": 8}),
])
def test_a_command_writes_what_the_api_writes_through_the_one_door(tiny_config, tiny_split, tmp_path, command, name,
                                                                  options, settings, capsys):
    """An analysis's command and compose_lens.run_analysis run the same declaration: the same tables, byte for
    byte, and the same settings in the provenance (issue 41: patch and ablate were written by hand beside the
    registered analyses, with other files and unguarded sizes)."""
    import json

    from compose_lens.cli import main
    from compose_lens.report.context import run_analysis
    from compose_lens.training.runs import save_model
    from compose_lens.training.subject import load_subject

    save_model(tl.boot(tiny_config.model), tiny_config, tmp_path / "model")
    assert main([command, str(tmp_path / "model"), *options, "--out", str(tmp_path / "cli"), "--quiet"]) == 0
    result = run_analysis(name, load_subject(str(tmp_path / "model")), tmp_path / "api", **settings)
    for stem in result.tables:
        assert (tmp_path / "cli" / f"{stem}.csv").read_bytes() == (tmp_path / "api" / f"{stem}.csv").read_bytes()
        said = [json.loads((tmp_path / where / f"{stem}.provenance.json").read_text())["settings"]
                for where in ("cli", "api")]
        assert said[0] == said[1] and all(said[0][k] == v for k, v in settings.items())


def test_an_option_of_several_values_keeps_every_repeat_and_its_default_when_absent():
    """``--receiver A --receiver B`` is two receivers (argparse's nargs='+' alone kept the last flag's values,
    silently dropping the first), ``--ranks 4 16`` two ranks, and no flag the declaration's default."""
    from compose_lens.cli import analysis, build_parser

    def settings(argv):
        args = build_parser().parse_args(argv)
        return analysis._settings_of(registry.by_name(registry.ANALYSES, args.analysis), args)

    paths = settings(["path-patch", "paper", "--receiver", "blocks.1.head0.q", "--receiver", "blocks.1.mlp", "--out", "o"])
    assert paths["receivers"] == ("blocks.1.head0.q", "blocks.1.mlp")
    assert settings(["das", "paper", "--ranks", "4", "16", "--out", "o"])["ranks"] == (4, 16)
    assert settings(["das", "paper", "--out", "o"])["ranks"] == tuple(registry.DAS.settings["ranks"])
    assert settings(["patch-heads", "paper", "--out", "o"])["components"] == registry.HEAD_PATCHING.settings["components"]


def test_every_declaration_is_named_by_the_registry_package():
    """The registry is a package of declaration modules: each declaration in ANALYSES is one of its public
    names (what ``registry.DLA`` and friends read), and nothing else is declared that ANALYSES leaves out."""
    declared = {name for name in registry.__all__ if isinstance(getattr(registry, name), registry.Analysis)}
    assert {id(getattr(registry, name)) for name in declared} == {id(a) for a in registry.ANALYSES}


def test_the_analyses_of_a_run_are_declared_and_their_commands_built_from_the_declarations(loaded, tmp_path):
    """dynamics and llc read a run's checkpoints (``of="run"``): their commands come from the declarations
    (RUN, --split, --device and each declared option; steps with commas or spaces, a negative one refused in
    one line), analyze leaves them out, and run_analysis refuses one model given to them, or a run given to
    a one-model analysis, in one line."""
    from compose_lens.cli import analysis, build_parser
    from compose_lens.core.errors import ComposeLensError

    runs_of = {a.name for a in registry.ANALYSES if a.of == "run"}
    assert runs_of == {"dynamics", "early_jump", "llc"}

    def settings(argv):
        args = build_parser().parse_args(argv)
        return args, analysis._settings_of(registry.by_name(registry.ANALYSES, args.analysis), args)

    args, chosen = settings(["dynamics", "runs/x", "--steps", "10,20", "30", "--no-circuit", "--device", "cuda",
                             "--out", "o"])
    assert (args.source, args.device, chosen["steps"], chosen["no_circuit"]) == ("runs/x", "cuda", (10, 20, 30), True)
    assert settings(["llc", "runs/x", "--n-beta", "2.5", "--component", "blocks.1.mlp", "--out", "o"])[1] == \
        {**registry.LLC.settings, "n_beta": 2.5, "component": "blocks.1.mlp"}
    with pytest.raises(ComposeLensError, match="--steps"):
        settings(["dynamics", "runs/x", "--steps", "10,-20", "--out", "o"])
    with pytest.raises(ComposeLensError, match="reads a run"):
        context.run_analysis("dynamics", loaded)
    with pytest.raises(ComposeLensError, match="reads one model"):
        context.run_analysis("dla", context.RunContext("runs/x"))
    summary = write_analysis(loaded, tmp_path, causal=False)
    assert summary and not runs_of & {p.name for p in tmp_path.iterdir()}
