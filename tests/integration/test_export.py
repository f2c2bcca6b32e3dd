"""compose-lens export: a folder plain TransformerLens loads (no compose-lens there), with the same logits,
that compose-lens reads back as a model of the same task."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest
import torch
from safetensors.torch import load_file, save_file

from compose_lens.cli import main
from compose_lens.data.sampler import concat_batches, make_pools
from compose_lens.core.errors import ComposeLensError
from compose_lens.training.evaluate import answer_logits
from compose_lens.training.subject import export_transformerlens, load_subject

PLAIN = """
import json, sys
sys.modules["compose_lens"] = None  # this process cannot import compose-lens
from safetensors.torch import load_file, save_file
from transformer_lens.config import TransformerBridgeConfig
from transformer_lens.model_bridge import TransformerBridge
from transformer_lens.model_bridge.sources import native  # registers boot_native
for folder, tokens, logits in json.loads(sys.argv[1]):
    cfg = TransformerBridgeConfig(**json.load(open(folder + "/config.json")), architecture="TransformerLensNative")
    model = TransformerBridge.boot_native(cfg)
    model.load_state_dict(load_file(folder + "/model.safetensors"))
    save_file({"logits": model.eval()(load_file(tokens)["tokens"])[:, -1].detach().contiguous()}, logits)
"""


def plain_logits(jobs: list[tuple], cwd) -> None:
    """Each (folder, tokens file, logits file): the folder loaded by plain TransformerLens, in a process that
    cannot import compose-lens, and its logits at the last position written."""
    done = subprocess.run([sys.executable, "-c", PLAIN, json.dumps([list(map(str, job)) for job in jobs])], cwd=cwd,
                          capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-2000:]


def test_the_export_loads_in_plain_transformerlens_with_the_same_logits(tmp_path):
    folder = tmp_path / "exported"
    assert main(["export", "paper", "--out", str(folder)]) == 0
    assert {p.name for p in folder.iterdir()} >= {"config.json", "model.safetensors", "task.json", "MODEL_CARD.md"}
    paper = load_subject("paper")
    tokens = concat_batches(make_pools(paper.split, 20))[0].tokens
    save_file({"tokens": tokens.contiguous()}, str(tmp_path / "tokens.safetensors"))
    plain_logits([(folder, tmp_path / "tokens.safetensors", tmp_path / "logits.safetensors")], tmp_path)
    theirs = load_file(str(tmp_path / "logits.safetensors"))["logits"]
    ours = answer_logits(paper.model, paper.config.model, tokens)
    torch.testing.assert_close(theirs, ours, atol=1e-4, rtol=1e-5)  # the fast table forward against TL: rounding
    back = load_subject(folder)  # read back through its task.json, as a researcher's own model
    assert back.task == paper.task and torch.equal(back.split.heldout_pairs, paper.split.heldout_pairs)
    torch.testing.assert_close(answer_logits(back.model, back.config.model, tokens), ours, atol=1e-6, rtol=1e-6)


# every layout a declaration can say, and the four models of issue 54 (a stalled infix subtract model, a
# LayerNorm model, a table-operation model with held-out pairs and forbidden slots, a multiply model)
LAYOUTS = {
    "prefix, numbers out, shuffled ids": (dict(query="prefix", output="numbers"), {}),
    "infix, numbers out, shuffled ids": (dict(query="infix", output="numbers"), {}),
    "prefix, vocab out, unused ids": (dict(query="prefix", output="vocab", unused=3), {}),
    "infix, vocab out, unused ids, n_ctx past seq_len": (dict(query="infix", output="vocab", unused=2), {"n_ctx": 14}),
    "ids in order": (dict(shuffled=False), {}),
    "infix subtract": (dict(query="infix", output="vocab", unused=1, operation="subtract"), {}),
    "LayerNorm": (dict(query="infix", output="vocab", unused=1), {"normalization_type": "LN"}),
    "table, held-out pairs, forbidden slots": (dict(operation="table", unused=1, heldout_pairs=((0, 1), (2, 3)),
                                                   left_forbidden=("t",), right_forbidden=("p", "q")), {}),
    "multiply, vocab out": (dict(output="vocab", operation="multiply", unused=1), {"n_heads": 1}),
}


def test_every_layout_exports_exactly_and_reads_back(tmp_path):
    """The folder holds the model in its own layout: its own ids, positions and output classes, every tensor as
    it was (an unused id's embedding, a non-number output's unembedding, positions past seq_len). Plain
    TransformerLens, in a process that cannot import compose-lens, gives the source's logits over every
    output class (max difference printed), and compose-lens reads the folder back as the same subject.
    Before, a prefix model's weights were written in the study's token order with an unused id dropped, a
    vocab-output model's unembedding cut to p rows, and an infix model refused."""
    from tests import user_models

    jobs, sources = [], {}
    for i, (name, (keys, arch)) in enumerate(LAYOUTS.items()):
        decl = user_models.declaration(**keys)
        model = user_models.tl_model(decl, seed=i, **arch)
        source = user_models.save(model, decl, tmp_path / f"source{i}")
        assert main(["export", str(source), "--out", str(tmp_path / f"out{i}")]) == 0
        tokens = user_models.user_tokens(decl, 16)
        with torch.no_grad():
            want = model(tokens)[:, -1]
        save_file({"tokens": tokens.contiguous()}, str(tmp_path / f"tokens{i}.safetensors"))
        jobs.append((tmp_path / f"out{i}", tmp_path / f"tokens{i}.safetensors", tmp_path / f"logits{i}.safetensors"))
        sources[name] = (source, tmp_path / f"out{i}", want, model, decl)
    plain_logits(jobs, tmp_path)
    for i, (name, (source, out, want, model, decl)) in enumerate(sources.items()):
        theirs = load_file(str(tmp_path / f"logits{i}.safetensors"))["logits"]
        assert theirs.shape == want.shape, name
        print(f"{name}: max |logit difference| {float((theirs - want).abs().max()):.2e}")
        torch.testing.assert_close(theirs, want, atol=1e-5, rtol=0, msg=name)
        written = load_file(str(out / "model.safetensors"))
        original = model.state_dict()
        assert set(written) == set(original), name
        for key, value in original.items():  # every tensor as it was, bit for bit
            assert torch.equal(written[key], value.float()), (name, key)
        assert json.loads((out / "config.json").read_text()) == json.loads((source / "config.json").read_text())
        first, back = load_subject(source), load_subject(out)
        assert back.declaration == first.declaration == decl, name
        assert (back.task, back.config.model) == (first.task, first.config.model), name
        assert torch.equal(back.split.is_train, first.split.is_train), name
        study = concat_batches(make_pools(first.split, 8))[0].tokens
        torch.testing.assert_close(answer_logits(back.model, back.config.model, study),
                                   answer_logits(first.model, first.config.model, study), atol=0, rtol=0)


def test_an_export_that_cannot_be_exact_writes_nothing(tmp_path):
    """A subject that holds only the study's rows of a model with unused ids (built in Python from the mapped
    weights, not read from the researcher's model) has no source for those rows: refused, nothing written."""
    import dataclasses

    from tests import user_models

    decl = user_models.declaration(output="vocab", unused=2)
    subject = dataclasses.replace(load_subject(user_models.tl_model(decl), decl), user_weights=None)
    with pytest.raises(ComposeLensError, match="vocabulary ids the task does not use") as info:
        export_transformerlens(subject, tmp_path / "out")
    assert "\n" not in str(info.value) and not (tmp_path / "out").exists()


def test_the_model_card_says_the_outcome_in_words(tiny_config, tmp_path):
    """MODEL_CARD.md's outcome line is the run's outcome and why, as `train` prints it (issue #59: the
    results.json record was printed as a Python dict)."""
    import json

    from compose_lens.training.train import Trainer

    Trainer(tiny_config, tmp_path / "run", progress=False).run()
    assert main(["export", str(tmp_path / "run"), "--out", str(tmp_path / "out")]) == 0
    outcome = json.loads((tmp_path / "run" / "results.json").read_text())["outcome"]
    card = (tmp_path / "out" / "MODEL_CARD.md").read_text()
    assert f"* outcome: {outcome['outcome']} ({outcome['why']})\n" in card and "{" not in card.split("```")[0]


def test_a_declaration_with_a_split_file_exports_the_split_it_read(tmp_path):
    """A model declared with a split_file is exported with that split written out (held-out pairs, slots, r and
    its seed): the export dropped the file and kept the rest of the declaration, so the folder read back held
    the study's procedure's split (f 0.7, seed 42), not the model's."""
    import dataclasses

    from tests import user_models

    user_models.declaration(f=0.5, seed=3, r=0.5).split().save(tmp_path / "split.json")
    decl = dataclasses.replace(user_models.declaration(), f=None, seed=42, split_file=str(tmp_path / "split.json"))
    source = user_models.save(user_models.tl_model(decl), decl, tmp_path / "source")
    assert main(["export", str(source), "--out", str(tmp_path / "out")]) == 0
    first, back = load_subject(source), load_subject(tmp_path / "out")
    assert "split_file" not in json.loads((tmp_path / "out" / "task.json").read_text())
    assert torch.equal(back.split.is_train, first.split.is_train)
    assert torch.equal(back.split.two_var_counts, first.split.two_var_counts)
