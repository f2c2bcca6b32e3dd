"""compose-lens export: a folder plain TransformerLens loads (no compose-lens there), with the same logits,
that compose-lens reads back as a model of the same task."""

from __future__ import annotations

import subprocess
import sys

import pytest
import torch
from safetensors.torch import load_file, save_file

from compose_lens.cli import main
from compose_lens.data.sampler import concat_batches, make_pools
from compose_lens.errors import ComposeLensError
from compose_lens.evaluate import answer_logits
from compose_lens.runs import export_transformerlens, load_subject

PLAIN = """
import json, sys
sys.modules["compose_lens"] = None  # this process cannot import compose-lens
from safetensors.torch import load_file, save_file
from transformer_lens.config import TransformerBridgeConfig
from transformer_lens.model_bridge import TransformerBridge
from transformer_lens.model_bridge.sources import native  # registers boot_native
folder = sys.argv[1]
cfg = TransformerBridgeConfig(**json.load(open(folder + "/config.json")), architecture="TransformerLensNative")
model = TransformerBridge.boot_native(cfg)
model.load_state_dict(load_file(folder + "/model.safetensors"))
tokens = load_file(sys.argv[2])["tokens"]
save_file({"logits": model.eval()(tokens)[:, -1].detach().contiguous()}, sys.argv[3])
"""


def test_the_export_loads_in_plain_transformerlens_with_the_same_logits(tmp_path):
    folder = tmp_path / "exported"
    assert main(["export", "paper", "--out", str(folder)]) == 0
    assert {p.name for p in folder.iterdir()} >= {"config.json", "model.safetensors", "task.json", "MODEL_CARD.md"}
    paper = load_subject("paper")
    tokens = concat_batches(make_pools(paper.split, 20))[0].tokens
    save_file({"tokens": tokens.contiguous()}, str(tmp_path / "tokens.safetensors"))
    done = subprocess.run([sys.executable, "-c", PLAIN, str(folder), str(tmp_path / "tokens.safetensors"),
                           str(tmp_path / "logits.safetensors")], cwd=tmp_path, capture_output=True, text=True,
                          timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    theirs = load_file(str(tmp_path / "logits.safetensors"))["logits"]
    ours = answer_logits(paper.model, paper.config.model, tokens)
    torch.testing.assert_close(theirs, ours, atol=1e-4, rtol=1e-5)  # the fast table forward against TL: rounding
    back = load_subject(folder)  # read back through its task.json, as a researcher's own model
    assert back.task == paper.task and torch.equal(back.split.heldout_pairs, paper.split.heldout_pairs)
    torch.testing.assert_close(answer_logits(back.model, back.config.model, tokens), ours, atol=1e-6, rtol=1e-6)


def test_an_infix_model_in_the_study_coordinates_is_not_exported(tmp_path):
    from tests.unit.test_subject import declaration, user_model

    decl = declaration()
    subject = load_subject(user_model(decl), decl)
    with pytest.raises(ComposeLensError, match="export the original"):
        export_transformerlens(subject, tmp_path / "out")
    assert not (tmp_path / "out").exists()
