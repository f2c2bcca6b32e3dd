"""compare A B: two models read on the same prompts, differences with paired intervals, 'changed'."""

from __future__ import annotations

import dataclasses
import json
import re
from html.parser import HTMLParser
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from compose_lens.report import compare as C
from compose_lens.cli import main
from compose_lens.model import tl
from compose_lens.report import context
from compose_lens.training.subject import load_subject

SMALL = {"pool_size": 150, "resamples": 200, "settings": {"same_mlp": {"n": 20}, "gradient": {"n": 32}}}
LAYER2_ATTENTION = [f"blocks.1.attn.{p}.{w}" for p in "qkvo" for w in ("weight", "bias")]


@pytest.fixture(scope="module")
def paper():
    return load_subject("paper", bridge=False)


def without_layer2_attention(subject):
    """``subject`` with every weight of layer 2's attention zeroed: uniform attention, nothing written."""
    state = {k: (v.clone().zero_() if k in LAYER2_ATTENTION else v) for k, v in tl.parameters(subject.model).items()}
    return dataclasses.replace(subject, model=tl.Weights(state, subject.config.model),
                               source="paper, layer-2 attention zeroed")


@pytest.fixture(scope="module")
def itself(paper):
    return C.compare(paper, paper, **SMALL)


@pytest.fixture(scope="module")
def lesioned(paper):
    return C.compare(paper, without_layer2_attention(paper), **SMALL).set_index("measure")


def test_a_model_against_itself_changes_nothing(itself):
    numeric = itself[itself["difference"].notna()]
    assert len(numeric) >= 20  # the pools, the role scores, the findings, the same-MLP effects
    assert (numeric["difference"] == 0).all()
    bootstrapped = itself["interval"].str.startswith("paired bootstrap")
    assert bootstrapped.sum() >= 14  # nine pools, two head roles, three attention findings
    assert (itself.loc[bootstrapped, ["low", "high"]] == 0).all().all()
    assert (itself["changed"] == False).all()  # noqa: E712 (NA would not be False)
    assert {"binder: component", "router: component", "same MLP: verdict", "MLP2 key frequencies"} <= set(itself["measure"])


def test_zeroing_layer_2_attention_moves_the_router_and_drops_accuracy(lesioned):
    router = lesioned.loc["router: component"]
    assert router["A"] == "blocks.1 head 0" and router["B"] != router["A"] and router["changed"] == True
    score = lesioned.loc["router: score"]
    assert score["difference"] < 0 and score["high"] < 0 and score["changed"] == True
    two_var = lesioned.loc["accuracy: 2var_train"]
    assert two_var["B"] < two_var["A"] - 0.5  # the values are no longer routed to =
    assert two_var["low"] <= two_var["difference"] <= two_var["high"] < 0 and two_var["changed"] == True
    # Wilson intervals of each model's own accuracy
    assert two_var["A_low"] <= two_var["A"] <= two_var["A_high"] and two_var["B_low"] <= two_var["B"] <= two_var["B_high"]
    # layer 1 is untouched: the binder and its score are the same
    assert lesioned.loc["binder: score", "difference"] == 0 and lesioned.loc["binder: score", "changed"] == False


def test_the_resampled_statistics_give_the_registered_findings_on_all_prompts(reference_dir):
    """The intervals resample the statistic the probes analysis reports: on all the prompts
    (no resampling) each gives the analysis's finding (same batch, same heads). At step 5001 none
    is saturated (the paper model scores 1 on each, on any batch)."""
    from compose_lens import registry

    with context.Context(load_subject(reference_dir / "step_5001.pth", bridge=False), 0) as ctx:
        facts = context.compute(registry.by_name(registry.ANALYSES, "probes"), ctx).facts
        acts = C.probes.probe_activations(ctx.loaded, C.PROBE_SEQUENCES, 0, heads=ctx.heads)
        everything = C._subset(acts, np.arange(len(acts)))
        for key, statistic in C.OVER_PROMPTS.items():
            assert 0.2 < facts[key] < 0.999, (key, facts[key])
            assert statistic(ctx, everything) == pytest.approx(facts[key], abs=1e-7), key


def test_two_tasks_are_refused_in_one_line(paper):
    task = dataclasses.replace(paper.config.task, r=paper.config.task.r / 2)
    other = dataclasses.replace(paper, config=dataclasses.replace(paper.config, task=task))
    with pytest.raises(C.ComposeLensError, match=f"different tasks \\(r {paper.config.task.r} vs {task.r}\\)"):
        C.check_comparable(paper, other)


def test_two_splits_are_refused_in_one_line(paper):
    other = dataclasses.replace(paper, split=dataclasses.replace(paper.split, heldout_pairs=paper.split.heldout_pairs[1:]))
    with pytest.raises(C.ComposeLensError, match="hold out different pairs"):
        C.check_comparable(paper, other)


def test_the_command_reads_your_own_model_with_its_task(tmp_path, capsys, monkeypatch):
    """--task goes to the TransformerLens model directory only (paper carries its own task), and
    the exported paper model is of paper's task and split: comparable."""
    assert main(["export", "paper", "--out", str(tmp_path / "mine")]) == 0
    monkeypatch.setattr(C, "compare", lambda a, b, **kw: _table(a, b, kw))
    argv = ["compare", "paper", str(tmp_path / "mine"), "--task", str(tmp_path / "mine" / "task.json"),
            "--out", str(tmp_path / "c")]
    assert main(argv) == 0
    assert f"B: {tmp_path / 'mine'}" in capsys.readouterr().out


def test_the_command_writes_the_table_and_prints_it(tmp_path, capsys, monkeypatch):
    monkeypatch.setattr(C, "compare", lambda a, b, **kw: _table(a, b, kw))
    assert main(["compare", "paper", "paper", "--out", str(tmp_path / "c"), "--pool-size", "50", "--seed", "3"]) == 0
    out = capsys.readouterr().out
    assert "accuracy: 2var_train" in out and "B - A" in out
    table = pd.read_csv(tmp_path / "c" / "compare.csv")
    assert list(table.columns) == list(C.COLUMNS)
    record = json.loads((tmp_path / "c" / "compare.provenance.json").read_text())
    assert record["seed"] == 3 and record["pool_size"] == 50 and record["b"].endswith("paper")
    doc = json.loads((tmp_path / "c" / "compare.json").read_text())
    assert doc["rows"][0]["measure"] == "accuracy: 2var_train" and doc["rows"][1]["low"] is None
    page = (tmp_path / "c" / "compare.html").read_text()
    assert [mark for mark, cells in PageRows(page).rows if cells] == ["changed", "changed"]
    assert "compare.html" in out


class PageRows(HTMLParser):
    """Each ``<tr>`` of a page with a class or cells: (its class, its cells' text)."""

    def __init__(self, text: str):
        super().__init__()
        self.rows: list[tuple[str | None, list[str]]] = []
        self.in_cell = False
        self.feed(text)

    def handle_starttag(self, tag, attrs):
        if tag == "tr":
            self.rows.append((dict(attrs).get("class"), []))
        elif tag == "td":
            self.rows[-1][1].append("")
            self.in_cell = True

    def handle_endtag(self, tag):
        self.in_cell = self.in_cell and tag != "td"

    def handle_data(self, data):
        if self.in_cell:
            self.rows[-1][1][-1] += data


@pytest.mark.parametrize("which", ["itself", "lesioned"])
def test_the_page_holds_every_row_and_marks_the_changed_ones(which, request):
    table = request.getfixturevalue(which)
    table = table.reset_index() if "measure" not in table else table
    page = C.html_page(table)
    assert not re.search(r"""(src|href)\s*=\s*["']?\s*(https?:)?//""", page) and "<script" not in page
    rows = [(mark, cells) for mark, cells in PageRows(page).rows if cells]
    assert [cells[0] for _, cells in rows] == list(table["measure"])  # every row once, in the table's order
    for (mark, cells), text, row in zip(rows, C.text_table(table), table.itertuples()):
        assert cells[-5:-2] == text[1:4] and cells[-2] == row.interval and cells[-1] == text[4]  # intervals and all
        assert len(cells) == (7 if row.group == "findings" else 6)  # what a finding measures, beside it
        assert len(cells) == 6 or cells[1] == row.what
        expected = "changed" if row.changed is True else "unsure" if row.changed is pd.NA else None
        assert mark == expected, (row.measure, row.changed, mark)
    marked = [mark for mark, _ in rows]
    if which == "lesioned":  # the router moved, 2-var accuracy fell: highlighted; the binder kept: not
        assert marked.count("changed") == int((table["changed"] == True).sum()) >= 3  # noqa: E712
        assert rows[list(table["measure"]).index("router: component")][0] == "changed"
        assert rows[list(table["measure"]).index("binder: score")][0] is None
    else:
        assert set(marked) == {None}
    assert f'changed: {marked.count("changed")}<' in page


def _table(a, b, options):
    rows = [{"measure": "accuracy: 2var_train", "what": "", "group": "pool accuracy", "A": 1.0, "A_low": 0.9,
             "A_high": 1.0, "B": 0.5, "B_low": 0.4, "B_high": 0.6, "difference": -0.5, "low": -0.6, "high": -0.4,
             "interval": "paired bootstrap over 50 prompts", "changed": True},
            {"measure": "router: component", "what": "", "group": "located roles", "A": "blocks.1 head 0",
             "A_low": np.nan, "A_high": np.nan, "B": "none", "B_low": np.nan, "B_high": np.nan, "difference": None,
             "low": np.nan, "high": np.nan, "interval": "n/a (a name)", "changed": True}]
    table = pd.DataFrame(rows, columns=list(C.COLUMNS))
    table.attrs.update({"a": a.source, "b": b.source, **options})
    return table


@pytest.mark.parametrize("argv, says", [
    (["compare", "paper", "no/such/model.pth", "--out", "OUT"], "no/such/model.pth"),
    (["compare", "paper", "paper", "--out", "OUT", "--pool-size", "0"], "--pool-size 0: use at least 10"),
    (["compare", "paper", "paper", "--out", "OUT", "--task", "task.json"], "--task task.json: neither paper nor paper"),
    (["compare", "paper", "paper", "--out", "OUT", "--colour", "red"], "unrecognized arguments: --colour"),
    (["compare", "paper", "--out", "OUT"], "the following arguments are required: B"),
])
def test_bad_input_is_one_line_and_exit_2(tmp_path, capsys, argv, says):
    argv = [str(tmp_path / "o") if a == "OUT" else a for a in argv]
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert says in err and err.count("\n") == 1, err
    assert not (tmp_path / "o").exists()


def test_a_model_an_analysis_cannot_read_is_refused_by_name_before_it_is_loaded(tmp_path, capsys):
    """compare guards every analysis it reads on both models before either is loaded, naming the model it
    refuses (issue 59). A LayerNorm model, its first case, is measured now (issue 54: the same-MLP verdict
    says inconclusive, and why); a model without an MLP is one no same-MLP test can read. Its folder holds
    no weights: the refusal comes from its config.json alone."""
    from compose_lens.core.config import RunConfig

    config = RunConfig().with_overrides(["mlp_blocks=[]"])
    (tmp_path / "no_mlp").mkdir()
    (tmp_path / "no_mlp" / "config.json").write_text(json.dumps(config.to_dict()))
    assert main(["compare", "paper", str(tmp_path / "no_mlp"), "--out", str(tmp_path / "o"), "--quiet"]) == 2
    err = capsys.readouterr().err
    assert f"{tmp_path / 'no_mlp'}: the model has no MLP" in err and err.count("\n") == 1, err
    assert not (tmp_path / "o").exists()
    C.check_measurable(RunConfig().with_overrides(["normalization_type=LN"]), "a LayerNorm model")  # read now


def test_a_difference_without_an_interval_prints_at_its_operands_decimals():
    # 0.7914 - 0.7084 printed to four significant digits read 0.08300, a digit its operands do not resolve
    rows = [{"measure": m, "what": "", "group": "g", "A": a, "A_low": np.nan, "A_high": np.nan, "B": b, "B_low": np.nan,
             "B_high": np.nan, "interval": "n/a", "difference": b - a, "low": np.nan, "high": np.nan, "changed": True}
            for m, a, b in (("adder: score", 0.7084, 0.7914), ("ov", 1.0, 0.9989))]
    assert [row[3] for row in C.text_table(pd.DataFrame(rows))] == ["0.0830", "-0.0011"]


def test_compare_html_fits_a_1200_px_window_in_chromium(tmp_path):
    """Every table of compare.html (the committed step 5001 against 10001 comparison) fits its box at a
    1,200 px window: the findings table was 1,316 px in a 1,137 px box, its "changed" column behind a
    scrollbar."""
    import json
    import re
    import shutil
    import subprocess

    import pandas as pd

    from compose_lens.report.compare import html_page

    chromium = shutil.which("chromium") or shutil.which("chromium-browser")
    if chromium is None:
        pytest.skip("no chromium here")
    saved = json.loads((Path(__file__).resolve().parents[2] / "experiments" / "results" / "compare" /
                        "compare.json").read_text())
    table = pd.DataFrame(saved["rows"])
    table.attrs.update({k: saved[k] for k in ("a", "b")})
    probe = ('<script>window.addEventListener("load", function () { document.body.setAttribute("data-widths", '
             'JSON.stringify(Array.prototype.map.call(document.querySelectorAll("table"), function (t) { return '
             '[Math.round(t.getBoundingClientRect().width), t.parentElement.clientWidth]; }))); });</script>')
    page = tmp_path / "compare.html"
    page.write_text(html_page(table).replace("</body>", probe + "</body>", 1), encoding="utf-8")
    done = subprocess.run([chromium, "--headless", "--no-sandbox", "--disable-gpu", "--no-first-run",
                           "--disable-background-networking", f"--user-data-dir={tmp_path / 'profile'}",
                           "--window-size=1200,900", "--virtual-time-budget=5000", "--dump-dom", page.as_uri()],
                          capture_output=True, text=True, timeout=120)
    widths = json.loads(re.search(r'data-widths="([^"]*)"', done.stdout).group(1).replace("&quot;", '"'))
    assert len(widths) >= 5 and all(width <= box for width, box in widths), widths
