"""The offline report: one self-contained file that headless Chromium renders with networking off.

The browser check copies the page with a small recorder script first in its head:
it collects ``console.error`` calls, uncaught errors, unhandled promise rejections
and failed resource loads, and on ``load`` writes them (and how many images
decoded) into attributes of ``<body>``. ``chromium --dump-dom`` then returns the
DOM after the scripts ran, so the test reads what happened in the page, and
Chromium's own console log on stderr is checked for uncaught errors as well.
Every host name resolves to nothing and every request goes to a dead proxy, so
anything that tries the network fails loudly.
"""

from __future__ import annotations

import json
import re
import shutil
import subprocess
from html import unescape
from pathlib import Path

import pytest

from compose_lens.cli import main
from compose_lens.core.config import ModelConfig, RunConfig, TaskConfig, TrainConfig
from compose_lens.report import sections

CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
EXTERNAL = re.compile(r"""<(script|link|img|iframe)[^>]+(src|href)\s*=\s*["']?\s*(https?:)?//""", re.I)

RECORDER = """<script>
(function () {
  var problems = [];
  var keep = function (kind, text) { problems.push(kind + ": " + String(text).slice(0, 300)); };
  var error = console.error;
  console.error = function () { keep("console.error", Array.prototype.join.call(arguments, " "));
                                return error.apply(console, arguments); };
  window.addEventListener("error", function (e) {
    var t = e.target;
    if (t && t !== window && (t.src || t.href)) { keep("failed to load", t.src || t.href); }
    else { keep("uncaught", e.message); }
  }, true);
  window.addEventListener("unhandledrejection", function (e) { keep("unhandled rejection", e.reason); });
  window.addEventListener("load", function () {
    setTimeout(function () {
      var images = Array.prototype.slice.call(document.images);
      document.body.setAttribute("data-problems", JSON.stringify(problems));
      document.body.setAttribute("data-images", images.length);
      document.body.setAttribute("data-height", document.documentElement.scrollHeight);
      document.body.setAttribute("data-images-decoded",
        images.filter(function (i) { return i.complete && i.naturalWidth > 0; }).length);
    }, 1500);
  });
})();
</script>"""


def render_offline(page: Path, workdir: Path) -> tuple[str, str]:
    """(DOM after the scripts ran, Chromium's stderr) for ``page``, with networking off."""
    instrumented = workdir / ("checked_" + page.name)
    text = page.read_text(encoding="utf-8")
    instrumented.write_text(text.replace("<head>", "<head>\n" + RECORDER, 1), encoding="utf-8")
    profile = workdir / "chromium-profile"
    profile.mkdir(exist_ok=True)
    command = [CHROMIUM, "--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
               "--no-first-run", f"--user-data-dir={profile}", "--host-resolver-rules=MAP * ~NOTFOUND",
               "--proxy-server=127.0.0.1:9", "--enable-logging=stderr", "--v=0",
               "--virtual-time-budget=10000", "--dump-dom", instrumented.as_uri()]
    done = subprocess.run(command, capture_output=True, text=True, timeout=120)
    return done.stdout, done.stderr


def body_attribute(dom: str, name: str) -> str:
    match = re.search(rf'<body[^>]*\s{name}="([^"]*)"', dom)
    assert match, f"the page never finished loading (no {name} on <body>)"
    return unescape(match.group(1))


def drawn_views(dom: str) -> tuple[int, int]:
    """(attention-view divs, those the circuitsvis JS drew into)."""
    views = re.findall(r'<div id="circuits-vis-[^"]+" class="attention-view"[^>]*>(\s*<?)', dom)
    return len(views), sum(1 for v in views if v.strip() == "<")


def assert_clean_offline_render(page: Path, workdir: Path, min_views: int, min_images: int) -> str:
    dom, log = render_offline(page, workdir)
    problems = json.loads(body_attribute(dom, "data-problems"))
    assert problems == [], problems
    assert int(body_attribute(dom, "data-images-decoded")) == int(body_attribute(dom, "data-images")) >= min_images
    views, drawn = drawn_views(dom)
    assert views >= min_views and drawn == views, f"{drawn} of {views} attention views drawn"
    uncaught = [line for line in log.splitlines() if "CONSOLE" in line and re.search(r"Uncaught|Error", line)]
    assert uncaught == [], uncaught
    return dom


needs_chromium = pytest.mark.skipif(CHROMIUM is None, reason="chromium is not installed (make test installs it)")


@pytest.fixture(scope="module")
def reported_run(tmp_path_factory):
    """A tiny trained run and its report."""
    from compose_lens.report import build_report
    from compose_lens.training.train import Trainer

    task = TaskConfig(modulus=7, n_vars=6, left_forbidden=("f",), right_forbidden=("a",), f=0.8)
    config = RunConfig(task=task, model=ModelConfig.for_task(task, d_model=32, d_head=32, d_mlp=64),
                       train=TrainConfig(steps=30, batch_size=64, eval_every=10, checkpoint_every=10, pool_size=64))
    run_dir = tmp_path_factory.mktemp("report") / "run"
    Trainer(config, run_dir, progress=False).run()
    page, problems = build_report(run_dir, progress=False)
    return run_dir, page, problems


def test_report_is_one_self_contained_file(reported_run):
    run_dir, page, _ = reported_run
    assert page == run_dir / "report.html"
    text = page.read_text()
    assert not EXTERNAL.search(text), "the report must not load anything from the network"
    assert "unpkg" not in text and "sourceMappingURL" not in text
    assert text.count("var CircuitsVis") == 1
    for title in ("Configuration", "Results: the study and this run", "Training dynamics and the three phases",
                  "Circuit summary", "Attention on example sequences", "Activation patching by token role",
                  "Ablation: accuracy lost per pool", "Same MLP for constants and variables"):
        assert title in text, title
    # what the model has learned comes first: before the contents and every section
    assert text.index('<div class="learned"') < text.index('<nav class="toc">')
    toc = text[text.index('<nav class="toc">'):text.index("</nav>")]
    # every section that reads this model is listed; the task-variant section has nothing to read in
    # the study's task and is left out, not shown empty
    config = RunConfig.from_dict(json.loads((run_dir / "config.json").read_text()))
    reading = [anchor for anchor, _, section in sections()
               if getattr(section, "reads", None) is None or section.reads(config)]
    assert "variant" not in reading and len(reading) == len(sections()) - 1
    assert toc.count("<li>") == len(reading) and '<a href="#patching">' in toc
    assert '<a href="#variant">' not in toc
    # one interactive view per example sequence, its heatmap folded under it
    assert text.count('class="attention-view"') == 4 and text.count("<details><summary>heatmap") == 4
    assert "&gt; 98 %" in text  # the study's headline number beside this run's
    assert text.count('src="data:image/png;base64,') >= 5
    # the dynamics it needed were computed and kept with the run, the figures saved as PNG + CSV
    assert (run_dir / "results" / "dynamics.csv").exists() and (run_dir / "results" / "phases.json").exists()
    assert (run_dir / "figures" / "accuracy_by_variable_count.png").exists()
    assert (run_dir / "figures" / "accuracy_by_variable_count.csv").exists()


def test_a_figure_the_report_computed_is_encoded_once_its_file_and_its_image_the_same_bytes(reported_run):
    """Each analysis the report computed wrote its figures into results/<name>/figures/ at the declaration's dpi;
    a section showing one of them embeds those very bytes and keeps the same file beside the page: one drawing
    per name, encoded once (an image encoded again at the page's dpi, or drawn again, differs)."""
    import base64

    run_dir, page, _ = reported_run
    images = {base64.b64decode(uri) for uri in re.findall(r'src="data:image/png;base64,([^"]+)"', page.read_text())}
    written = {p.name: p for p in (run_dir / "results").glob("*/figures/*.png")}
    shown = {p.name: p for p in (run_dir / "figures").glob("*.png") if p.name in written}
    assert {"ablation.png", "patching.png", "circuit.png"} <= set(shown)
    for name, path in shown.items():
        assert path.read_bytes() == written[name].read_bytes(), f"{name}: the page's file is another drawing"
        assert path.read_bytes() in images, f"{name} is not the image the page shows"


def test_the_circuit_summary_lists_measures_not_the_record_of_how_they_were_made(reported_run):
    """The summary's table shows what the model does; its record (seed, threads, version) is in the file's
    provenance, never a row among the measures."""
    from compose_lens.core.provenance import provenance

    text = reported_run[1].read_text()
    section = text[text.index('<h2 id="circuit">'):]
    section = section[:section.index("</table>")]
    assert "<td>n_sequences</td>" in section
    assert not [key for key in provenance(seed=0, source="x") if f"<td>{key}</td>" in section]


def test_a_reported_run_holds_only_what_train_overwrite_may_delete(reported_run):
    """Every file the report and training wrote is in the layout ``train --overwrite`` checks
    (runs.run_layout): a figure or result added without a name there would make --overwrite refuse."""
    from compose_lens.training.runs import foreign_in_run

    assert foreign_in_run(reported_run[0]) is None


@needs_chromium
def test_report_renders_offline_in_chromium(reported_run, tmp_path):
    _, page, _ = reported_run
    dom = assert_clean_offline_render(page, tmp_path, min_views=4, min_images=5)
    assert "Attention on example sequences" in dom
    # no taller than its content needs: the tiny run's sections measured 19,950 px at Chromium's default
    # 800 px width, 20,377 px once the gradient terms got their figure and the pools their counts (issue 58),
    # 22,134 px with the answer lens's section (issue 56)
    height = int(body_attribute(dom, "data-height"))
    print(f"report height: {height} px")
    assert 3000 < height < 24000


@needs_chromium
def test_the_recorder_catches_errors_and_network_use(tmp_path):
    """The check itself: a page with a script error and a remote image does not pass."""
    page = tmp_path / "broken.html"
    page.write_text('<!DOCTYPE html><html><head></head><body><img src="https://example.com/x.png">'
                    "<script>console.error('boom'); notDefined();</script></body></html>")
    dom, _ = render_offline(page, tmp_path)
    problems = json.loads(body_attribute(dom, "data-problems"))
    kinds = {p.split(":")[0] for p in problems}
    assert {"console.error", "uncaught", "failed to load"} <= kinds, problems


@needs_chromium
def test_attention_page_renders_offline_in_chromium(tiny_config, tiny_split, tmp_path):
    from compose_lens.report.context import run_analysis
    from compose_lens.model import tl
    from compose_lens.training.subject import Subject

    run_analysis("attention", Subject(tl.boot(tiny_config.model), tiny_config, tiny_split, "tiny"), tmp_path / "v",
                 sequences=["b=3, e=5, b+2=?", "c=1, 4+c=?"])
    assert_clean_offline_render(tmp_path / "v" / "figures" / "attention.html", tmp_path, min_views=2, min_images=0)


def test_report_dynamics_catch_up_with_new_checkpoints(reported_run, tmp_path):
    """A report of a run still training evaluates only the checkpoints written since."""
    import pandas as pd

    from compose_lens import registry
    from compose_lens.report.context import RunContext, obtain

    run_dir, _, _ = reported_run
    results = tmp_path / "results"
    results.mkdir()
    table = pd.read_csv(run_dir / "results" / "dynamics.csv")
    table[table["step"] < 30].to_csv(results / "dynamics.csv", index=False)
    (results / "phases.json").write_text((run_dir / "results" / "phases.json").read_text())
    found = obtain(registry.DYNAMICS, RunContext(run_dir, progress=False, previous=results), results, {"update": True})
    updated, doc = found.tables["dynamics"], found.documents["phases"]
    assert updated["step"].tolist() == [10, 20, 30] and doc["timing"]["evaluated_now"] == 1
    again = obtain(registry.DYNAMICS, RunContext(run_dir, progress=False, previous=results), results, {"update": True})
    assert again.tables["dynamics"].equals(updated)  # read back (the declaration's saved), with its figures
    assert [f[0] for f in again.figures] == [f[0] for f in found.figures] == ["dynamics"]


def test_a_stalled_run_is_flagged_at_the_top_of_the_page_and_an_ordinary_one_is_not(reported_run, tmp_path):
    """The warning comes before the table of contents, not only inside the results section; a run still
    learning has none."""
    run_dir, page, _ = reported_run
    assert "This run stalled" not in page.read_text()  # a 30-step run is still learning
    assert "outcome (stall detector)" in page.read_text()
    stalled = tmp_path / "stalled"
    shutil.copytree(run_dir, stalled, ignore=shutil.ignore_patterns("report.html"))
    results = json.loads((stalled / "results.json").read_text())
    results["outcome"] = {"outcome": "stalled", "why": "routing never formed"}
    (stalled / "results.json").write_text(json.dumps(results))
    out = tmp_path / "stalled.html"
    assert main(["report", str(stalled), "--out", str(out), "--quiet"]) == 0
    text = out.read_text()
    assert text.index("This run stalled") < text.index('<nav class="toc">')
    assert text.count("This run stalled") == 2 and "routing never formed" in text


def test_report_has_the_logit_attribution_section(reported_run):
    run_dir, page, _ = reported_run
    text = page.read_text()
    assert '<h2 id="dla">Direct logit attribution and logit lens at =</h2>' in text
    section = text[text.index('<h2 id="dla">'):text.index("<h2", text.index('<h2 id="dla">') + 5)]
    assert "could not be made" not in section and 'alt="logit_attribution"' in section
    assert (run_dir / "figures" / "logit_attribution.png").exists()


def test_dynamics_writes_its_figure(reported_run, tmp_path):
    run_dir, _, _ = reported_run
    out = tmp_path / "dyn"
    assert main(["dynamics", str(run_dir), "--out", str(out), "--quiet", "--pool-size", "45", "--slot-size", "8",
                 "--no-circuit"]) == 0
    from PIL import Image

    with Image.open(out / "figures" / "dynamics.png") as image:
        assert image.format == "PNG" and image.size[0] > 600
    assert "figures/dynamics.png" in json.loads((out / ".compose-lens").read_text())["files"]


REFERENCE = Path(__file__).resolve().parents[2] / ".." / "shared" / "reference"


@pytest.mark.skipif(not (REFERENCE / "final.pth").exists(), reason="../shared/reference is absent")
def test_study_checkpoints_show_what_their_folder_says_not_compose_lens_defaults():
    from compose_lens.core.config import RunConfig
    from compose_lens.data.split import Split
    from compose_lens.report import ReportInputs, configuration_section
    from compose_lens.training.subject import Subject

    split = Split.load(REFERENCE / "split.json")
    subject = Subject(None, RunConfig(task=split.task), split, str(REFERENCE))
    inputs = ReportInputs(run_dir=REFERENCE, subject=subject, which="final.pth", results=None, texts=[], report=None)
    text = configuration_section(inputs)
    assert "30000" not in text and "30,000" not in text  # compose-lens's default steps
    assert '"cpu"' not in text and ">cpu<" not in text  # and its default device
    assert "<td>training: steps</td><td>unknown</td>" in text
    assert "<td>training: device</td><td>unknown</td>" in text
    assert "steps 1 to 30001" in text and "final.pth" in text  # what the folder does say
    assert "<td>task: f (share of addition pairs in training)</td><td>0.7</td>" in text
    assert "README.md" in text


def test_the_report_reads_saved_analyses_and_computes_only_what_is_missing(reported_run, tmp_path, monkeypatch):
    """The first report saved each registered analysis in results/<name>/ (as analyze writes them);
    a second report reads them all back, and computes only one whose folder is gone."""
    import shutil

    from compose_lens.report import context
    from compose_lens.report import build_report

    run_dir = tmp_path / "run"
    shutil.copytree(reported_run[0], run_dir)
    assert {p.name for p in (run_dir / "results").iterdir() if p.is_dir()} >= {"probes", "dla", "patching",
                                                                               "ablation", "same_mlp"}
    computed = []

    def refuse(analysis, ctx, settings=None):
        computed.append(analysis.name)
        raise RuntimeError(f"{analysis.name} computed again")

    from compose_lens.registry import ANALYSES

    titles = tuple(a.title for a in ANALYSES if a.section)  # the tiny model's own problems (no key
    monkeypatch.setattr(context, "compute", refuse)          # frequency yet) are the other sections'
    _, problems = build_report(run_dir, progress=False)
    assert computed == [] and not [p for p in problems if p.startswith(titles)], problems
    shutil.rmtree(run_dir / "results" / "dla")
    _, problems = build_report(run_dir, progress=False)
    registered = [p for p in problems if p.startswith(titles)]
    assert computed == ["dla"] and len(registered) == 1 and "dla computed again" in registered[0], problems


LABEL_CHECK = """<script>
window.addEventListener("load", function () {
  setTimeout(function () {
    var bad = [], labels = document.querySelectorAll(".attention-view h4");
    labels.forEach(function (h) {
      var r = h.getBoundingClientRect(), tile = h.parentElement.getBoundingClientRect();
      var thumb = h.nextElementSibling ? h.nextElementSibling.getBoundingClientRect() : null;
      if (r.left < tile.left - 0.5 || r.right > tile.right + 0.5) { bad.push(h.textContent + ": outside its tile"); }
      if (thumb && r.bottom > thumb.top + 0.5) { bad.push(h.textContent + ": covers the pattern"); }
    });
    document.body.setAttribute("data-labels", labels.length);
    document.body.setAttribute("data-label-faults", JSON.stringify(bad));
  }, 1500);
});
</script>"""


@needs_chromium
def test_the_head_labels_of_an_attention_view_cover_no_pattern(tiny_config, tiny_split, tmp_path):
    """circuitsvis places each head's name on its thumbnail; "layer 1 (blocks.0)" is wider than
    the thumbnail, so it covered the pattern and ran out of its tile (issue #29). The page's style
    sets it above the thumbnail."""
    from compose_lens.report.context import run_analysis
    from compose_lens.model import tl
    from compose_lens.training.subject import Subject

    run_analysis("attention", Subject(tl.boot(tiny_config.model), tiny_config, tiny_split, "tiny"), tmp_path / "v",
                 sequences=["b=3, e=5, b+2=?"])
    page = tmp_path / "v" / "figures" / "attention.html"
    page.write_text(page.read_text(encoding="utf-8").replace("<head>", "<head>\n" + LABEL_CHECK, 1), encoding="utf-8")
    dom, _ = render_offline(page, tmp_path)
    assert int(body_attribute(dom, "data-labels")) == 2  # one per layer
    assert json.loads(body_attribute(dom, "data-label-faults")) == []


@needs_chromium
def test_one_model_has_a_report_without_the_sections_that_read_checkpoints(reported_run, tmp_path, capsys):
    """``report MODEL --out`` on one model (here the tiny run's final model directory, which has no
    checkpoints/): the page holds what one model can show and renders offline; the sections that
    read a training run are left out, not shown empty ("1 checkpoints")."""
    run_dir, _, _ = reported_run
    model_dir = tmp_path / "model"
    model_dir.mkdir()
    for name in ("model.safetensors", "config.json"):
        shutil.copy(run_dir / name, model_dir / name)
    assert main(["report", str(model_dir), "--quiet"]) == 2  # no run directory to write into: --out
    assert "give --out" in capsys.readouterr().err
    page = tmp_path / "one.html"
    assert main(["report", str(model_dir), "--out", str(page), "--quiet"]) == 0
    text = page.read_text(encoding="utf-8")
    for shown in ("Configuration", "Pool accuracies", "Attention on example sequences", "Circuit summary"):
        assert shown in text, shown
    assert text.index('<div class="learned"') < text.index('<nav class="toc">')  # what it has learned, first
    for left_out in ("Training dynamics", "The early generalisation jump", "checkpoints (steps"):
        assert left_out not in text, left_out
    assert_clean_offline_render(page, tmp_path, min_views=1, min_images=1)


def _comparison_section(text: str) -> str:
    """The page's comparison section: from its heading to the end of the body (it is the last section)."""
    start = text.index('<h2 id="compare">')
    return text[start:text.index("</body>", start)]


def test_report_compare_adds_every_row_of_the_comparison(reported_run, tmp_path, capsys):
    """``report RUN --compare OTHER`` (issue 43: "compare ... a report section"): a last section holds
    every row of ``compose-lens compare`` for the run's final model (A) and OTHER (B), in the tables of
    compare.html (one builder), intervals and the changed rows' highlight included; the page without
    --compare has no such section. The same command shows an ``--example``."""
    from compose_lens.report import compare as C
    from tests.unit.test_compare import PageRows

    run_dir, plain_page, _ = reported_run
    assert 'id="compare"' not in plain_page.read_text(encoding="utf-8")
    assert "Compared with" not in plain_page.read_text(encoding="utf-8")
    other = run_dir / "checkpoints" / "step_000010"  # trained 10 steps: the final model differs from it
    page = tmp_path / "compared.html"
    assert main(["report", str(run_dir), "--out", str(page), "--quiet", "--compare", str(other),
                 "--example", "b=3, e=5, b+e=?"]) == 0
    text = page.read_text(encoding="utf-8")
    assert "b=3, e=5, b+e=?" in text
    assert f'<h2 id="compare">Compared with {other}</h2>' in text
    saved = tmp_path / "compared_files" / "results" / "compare"
    doc = json.loads((saved / "compare.json").read_text())
    rows = [(mark, cells) for mark, cells in PageRows(_comparison_section(text)).rows if cells]
    assert [cells[0] for _, cells in rows] == [r["measure"] for r in doc["rows"]]  # every row, once, in order
    assert len(rows) >= 20 and doc["b"] == str(other)
    marks = {True: "changed", None: "unsure", False: None}  # changed: True, ? (no interval to say), False
    assert [mark for mark, _ in rows] == [marks[r["changed"]] for r in doc["rows"]]
    assert "changed" in [mark for mark, _ in rows]  # ten steps of training apart: something moved
    shown = [cells for mark, cells in PageRows((saved / "compare.html").read_text()).rows if cells]
    assert [cells for _, cells in rows] == shown  # compare.html's own tables
    pools = [cells for _, cells in rows if cells[0].startswith("accuracy: ")]
    assert len(pools) == 9 and all("[" in cell for cells in pools for cell in cells[1:4])  # A, B, B - A intervals
    assert doc["settings"]["pool_size"] == C.POOL_SIZE  # as `compose-lens compare` reads them
    if CHROMIUM is not None:
        assert_clean_offline_render(page, tmp_path, min_views=1, min_images=1)


@pytest.mark.parametrize("other, says", [("no/such/model.pth", "no/such/model.pth: no such file or directory"),
                                         ("paper", "trained on different tasks")])
def test_report_compare_with_a_bad_model_is_one_line_and_writes_nothing(reported_run, tmp_path, capsys, other,
                                                                        says):
    run_dir, _, _ = reported_run
    page = tmp_path / "page.html"
    assert main(["report", str(run_dir), "--out", str(page), "--quiet", "--compare", other]) == 2
    err = capsys.readouterr().err
    assert says in err and err.count("\n") == 1, err
    assert list(tmp_path.iterdir()) == []  # no page, no page_files/
