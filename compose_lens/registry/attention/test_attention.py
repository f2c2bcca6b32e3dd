"""Attention views: the patterns, the marked cells, HTML that needs no network, and the ``attention``
command built from its declaration (compose_lens.registry.attention)."""

from __future__ import annotations

import json
import re

import torch

import pandas as pd

from compose_lens.analysis.activations import attention_patterns
from compose_lens.core.markup import VIEW_STYLE, circuitsvis_bundle, offline_page
from compose_lens.registry.attention.sequences import marked_cells, sequence_views
from compose_lens.cli import main
from compose_lens.report.context import run_analysis
from compose_lens.model import tl
from compose_lens.training.runs import save_model
from compose_lens.data.task import parse_sequence
from compose_lens.training.subject import Subject

EXTERNAL = re.compile(r"""<(script|link|img|iframe)[^>]+(src|href)\s*=\s*["']?\s*(https?:)?//""", re.I)


def test_marked_cells_follow_the_circuit(tiny_task):
    # tokens: PAD x6 | b 3 e 5 PAD PAD? -> the short form pads on the left
    tokens = parse_sequence(tiny_task, "b=3, e=5, b+2=?")
    b_at = tokens.index(tiny_task.first_var_token + 1)
    marks = marked_cells(tiny_task, tokens)
    last = tiny_task.seq_len - 1
    assert (last, last - 2, "operand") in marks[0] and (last, last - 1, "operand") in marks[0]
    previous = {(q, k) for q, k, kind in marks[0] if kind == "previous"}
    assert previous == {(b_at + 1, b_at), (b_at + 3, b_at + 2)}
    # layer 2: = to the value of b (after its assignment) and to the constant 2 itself
    assert sorted(marks[1]) == sorted([(last, b_at + 1, "value"), (last, last - 1, "value")])


def test_patterns_are_causal_distributions(tiny_config):
    model = tl.boot(tiny_config.model)
    tokens = torch.tensor([parse_sequence(tiny_config.task, "b=3, e=5, b+e=?")])
    patterns, logits = attention_patterns(model, tiny_config.model, tokens)
    assert patterns.shape == (1, 2, 1, tiny_config.task.seq_len, tiny_config.task.seq_len)
    assert torch.allclose(patterns.sum(-1), torch.ones(1, 2, 1, tiny_config.task.seq_len), atol=1e-5)
    assert patterns.triu(1).abs().max() == 0
    assert logits.shape == (1, tiny_config.task.modulus)


def test_offline_page_inlines_the_bundle_and_loads_nothing_from_the_network(tiny_config, tiny_split, tmp_path):
    model = tl.boot(tiny_config.model)
    texts = ["b=3, e=5, b+2=?", "PAD b 3 PAD e 5 PAD d 5 PAD PAD PAD + b d =", "c=1, 4+c=?"]
    result = run_analysis("attention", Subject(model, tiny_config, tiny_split, "tiny"), tmp_path, sequences=texts)
    views = result.value
    page = (tmp_path / "figures" / "attention.html").read_text()
    assert not EXTERNAL.search(page), "the page must not load anything from the network"
    assert "unpkg" not in page and "sourceMappingURL" not in page
    assert page.count("var CircuitsVis") == 1  # the bundle once, however many views
    assert page.count("CircuitsVis.render(") == len(texts)
    assert len(circuitsvis_bundle()) > 500_000
    for i in range(len(texts)):
        assert (tmp_path / "figures" / f"attention_{i}.png").stat().st_size > 1000
    saved = json.loads((tmp_path / "attention.json").read_text())
    assert [s["text"] for s in saved["sequences"]] == [v["text"] for v in views]
    assert all(s["label"] == v["label"] for s, v in zip(saved["sequences"], views))
    assert saved["provenance"]["settings"] == {"sequences": texts}
    # the table holds every view's patterns (what each heatmap's CSV held): the causal cells, marked as predicted
    table = pd.read_csv(tmp_path / "attention.csv")
    for i, view in enumerate(views):
        cells = table[(table["sequence"] == i) & (table["layer"] == 2) & (table["head"] == 0)]
        assert len(cells) == tiny_config.task.seq_len * (tiny_config.task.seq_len + 1) // 2
        weights = view["patterns"][1, 0][cells["query"].tolist(), cells["key"].tolist()]
        assert torch.allclose(torch.tensor(cells["attention"].to_numpy(), dtype=weights.dtype), weights)
        assert sorted(zip(*cells[cells["mark"] == "value"][["query", "key"]].to_numpy().T)) == \
            sorted((q, k) for q, k, _ in view["marks"][1])


def test_script_text_cannot_close_the_script_element():
    page = offline_page("t", "<p>x</p>")
    bundle_start = page.index("<script>") + len("<script>")
    assert "</script" not in page[bundle_start: page.index("</script>", bundle_start)].lower()


def test_attention_cli(tiny_config, tmp_path, capsys):
    model_dir = save_model(tl.boot(tiny_config.model), tiny_config, tmp_path / "model")
    assert main(["attention", str(model_dir), "b=3, e=5, b+2=?", "--out", str(tmp_path / "views")]) == 0
    assert (tmp_path / "views" / "figures" / "attention.html").exists()
    assert "label" in capsys.readouterr().out
    assert main(["attention", str(model_dir), "b=3, b+z=?", "--out", str(tmp_path / "bad")]) == 2


def test_the_command_built_from_the_declaration_writes_one_view_per_sequence_and_refuses_a_bad_one(
        tiny_config, tmp_path, capsys, monkeypatch):
    """``attention MODEL SEQ... --out DIR`` is built from the registered declaration (its sequences after
    MODEL): the page has one view per sequence, the command prints a line per sequence; none given, the
    split's examples; a sequence the task cannot parse, or more than 100, is refused in one line before
    the model loads, and nothing is written."""
    model_dir = save_model(tl.boot(tiny_config.model), tiny_config, tmp_path / "model")
    texts = ["b=3, e=5, b+2=?", "c=1, 4+c=?"]
    assert main(["attention", str(model_dir), *texts, "--out", str(tmp_path / "two"), "--quiet"]) == 0
    page = (tmp_path / "two" / "figures" / "attention.html").read_text(encoding="utf-8")
    assert page.count("CircuitsVis.render(") == 2 and all(json.dumps(t)[1:-1] in page for t in texts)
    said = capsys.readouterr().out.splitlines()
    assert [line.split()[1] for line in said if line.startswith(("ok", "WRONG"))] == ["b=3,", "c=1,"]
    saved = json.loads((tmp_path / "two" / "attention.json").read_text())
    assert [s["text"] for s in saved["sequences"]] == texts

    assert main(["attention", str(model_dir), "--out", str(tmp_path / "examples"), "--quiet"]) == 0
    from compose_lens.data.sampler import example_sequences
    from compose_lens.training.subject import load_subject

    examples = example_sequences(load_subject(str(model_dir)).split)
    saved = json.loads((tmp_path / "examples" / "attention.json").read_text())
    assert [s["text"] for s in saved["sequences"]] == examples and len(examples) >= 2

    capsys.readouterr()
    import compose_lens.training.subject

    def no_load(*args, **kwargs):
        raise AssertionError("the model was loaded before the sequences were checked")

    monkeypatch.setattr(compose_lens.training.subject, "load_subject", no_load)  # a refusal comes before any load
    assert main(["attention", str(model_dir), texts[0], "b=3, b+z=?", "--out", str(tmp_path / "bad")]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "'b=3, b+z=?'" in err[0], err
    assert not (tmp_path / "bad").exists()
    assert main(["attention", str(model_dir), *[texts[0]] * 101, "--out", str(tmp_path / "many")]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "101 sequences" in err[0] and "at most 100" in err[0], err
    assert not (tmp_path / "many").exists()


def test_reference_model_attends_where_the_circuit_says(reference_final):
    """The study's model: layer 1 = -> operands, layer 2 = -> values, on sequences it never saw."""
    loaded = reference_final
    texts = ["b=7, e=5, d=2, b+23=?", "PAD b 7 PAD e 5 PAD d 5 PAD PAD PAD + b d =", "a=40, j=18, k=9, 30+k=?"]
    for view in sequence_views(loaded.model, loaded.config, texts):
        assert view["correct"], view["text"]
        pattern = view["patterns"][:, 0]
        for layer in (0, 1):
            operand_cells = [(q, k) for q, k, kind in view["marks"][layer] if kind in ("operand", "value")]
            top2 = set(pattern[layer, -1].topk(2).indices.tolist())
            assert top2 == {k for _, k in operand_cells}, (view["text"], layer)


def test_the_views_read_back_from_attention_json_are_the_views_computed(tiny_config, tiny_split, tmp_path):
    """The report lays out the attention views from the saved ``attention.json`` where it was made alike
    (compose_lens.report.context.obtain): read back, each view is the computed one (patterns, marks per layer),
    so the page and the heatmap are the same."""
    from compose_lens import registry
    from compose_lens.report import context
    from compose_lens.registry.attention.figure import view_figure
    from compose_lens.registry.attention.interactive import view_html
    from compose_lens.registry.attention import views

    texts = ["b=3, e=5, b+2=?", "PAD b 3 PAD e 5 PAD d 5 PAD PAD PAD + b d ="]
    subject = Subject(tl.boot(tiny_config.model), tiny_config, tiny_split, "tiny")
    with context.Context(subject) as ctx:
        made = context.obtain(registry.ATTENTION, ctx, tmp_path, {"sequences": tuple(texts)})
        read = context.read(registry.ATTENTION, tmp_path, ctx, {"sequences": tuple(texts)})
    assert read is not None and read.value is None  # from the files, not the computation
    same_ids = lambda page: re.sub(r"circuits-vis-[0-9a-f]{12}", "ID", page)  # noqa: E731
    for computed, back in zip(made.value, views(read), strict=True):
        assert torch.equal(computed["patterns"], back["patterns"]) and computed["marks"] == back["marks"]
        assert same_ids(view_html(computed, focus=1)) == same_ids(view_html(back, focus=1))
        assert view_figure(computed)[1].equals(view_figure(back)[1])


def test_sequences_after_the_options_are_read_as_before_and_a_stray_flag_is_still_refused(tiny_config, tmp_path,
                                                                                          capsys):
    """`attention MODEL --out X 'seq'` worked when the command was hand-written (its sequences needed one value,
    so argparse took them after the options); built from the declaration, with none allowed, it must still."""
    model_dir = save_model(tl.boot(tiny_config.model), tiny_config, tmp_path / "model")
    out = tmp_path / "after"
    assert main(["attention", str(model_dir), "--out", str(out), "b=3, e=5, b+2=?", "--quiet", "e=1, e+2=?"]) == 0
    texts = [view["text"] for view in json.loads((out / "attention.json").read_text())["sequences"]]
    assert texts == ["b=3, e=5, b+2=?", "e=1, e+2=?"]
    assert main(["attention", str(model_dir), "--out", str(tmp_path / "flag"), "--bogus"]) == 2
    assert main(["dla", str(model_dir), "--out", str(tmp_path / "dla"), "b=3, e=5, b+2=?"]) == 2  # dla takes none
    assert "unrecognized arguments" in capsys.readouterr().err and not (tmp_path / "dla").exists()


def test_every_view_carries_its_colour_scale():
    """circuitsvis draws no colour scale; each view of the report and the attention page has one below it,
    0 to 1, styled by the page's own stylesheet."""
    from compose_lens.registry.attention.sequences import sequence_views
    from compose_lens.registry.attention.interactive import view_html
    from compose_lens.training.subject import load_subject

    subject = load_subject("paper", bridge=False)
    (view,) = sequence_views(subject.model, subject.config, ["b=7, e=5, b+23=?"])
    made = view_html(view)
    assert made.count('class="attention-scale"') == 1 and "<span>0</span><span class=\"bar\"></span><span>1</span>" in made
    assert ".attention-scale .bar{" in VIEW_STYLE
