"""docs/other-libraries.md runs as printed, and says what its comments say.

The page shows TransformerLens's own tools (the cache, decompose_resid and logit_attrs, hooks by
name, transformer_lens.patching), compose-lens's test_prompt and detect_head, and nnsight on the
paper model. Its python blocks run here in
one namespace, top to bottom, and each claim the page makes is checked on what they computed.
"""

from __future__ import annotations

import importlib.util
import re
from pathlib import Path

import pytest
import torch

PAGE = Path(__file__).resolve().parents[2] / "docs" / "other-libraries.md"


def blocks() -> list[str]:
    found = re.findall(r"```python\n(.*?)```", PAGE.read_text(), re.S)
    assert len(found) >= 5, f"{PAGE.name} lost its examples"
    return found


def run_block(code: str, namespace: dict, folder: Path, number: int) -> None:
    """Run one block as a file of its own (nnsight reads a traced block's source from its file)."""
    path = folder / f"other_libraries_block_{number}.py"
    path.write_text(code)
    exec(compile(code, str(path), "exec"), namespace)  # noqa: S102 - our own page


@pytest.fixture(scope="module")
def transformerlens_page(tmp_path_factory) -> dict:
    namespace: dict = {"__name__": "docs_other_libraries", "_folder": tmp_path_factory.mktemp("page")}
    for number, code in enumerate(blocks()):
        if "nnsight" not in code:
            run_block(code, namespace, namespace["_folder"], number)
    return namespace


def test_the_cache_and_the_answer_logit_decomposition(transformerlens_page):
    page = transformerlens_page
    logits, answers = page["logits"], page["answers"]
    assert answers.tolist() == [30, 7]
    assert logits[:, -1].argmax(-1).tolist() == [30, 7]
    assert page["labels"] == ["embed", "pos_embed", "0_attn_out", "0_mlp_out", "1_attn_out", "1_mlp_out"]
    attrs = page["attrs"]
    assert torch.allclose(attrs.sum(0), logits[torch.arange(2), -1, answers], atol=1e-4)
    assert torch.equal(attrs[page["labels"].index("0_mlp_out")], torch.zeros(2))  # the zero, frozen MLP
    mlp2 = attrs[page["labels"].index("1_mlp_out")]
    assert (mlp2 > 0.8 * attrs.sum(0)).all()  # "nearly all of it"


def test_hooks_by_name_and_transformerlens_patching(transformerlens_page):
    page = transformerlens_page
    assert (page["ablated"][:, -1].argmax(-1) != page["answers"]).all()
    by_position, changed = page["by_position"], page["changed"]
    assert by_position.shape == (2, 16) and changed == 9
    assert by_position[0, changed] > 0.9  # restoring the value brings the clean answer back
    others = [p for p in range(16) if p != changed]
    assert (by_position[0, others] < 0.1).all()  # the other positions do nothing
    assert page["by_head"].shape == (2, 1) and page["by_head"][1, 0] > 0.9


def test_test_prompt_and_detect_head_say_what_the_page_says(transformerlens_page):
    page = transformerlens_page
    found = page["found"]
    assert found.answer == 30 and found.rank == 0 and found.prob > 0.999 and len(found.top) == 3
    heads, duplicates = page["heads"], page["duplicates"]
    assert heads.shape == (2, 1)
    assert heads[0, 0] == pytest.approx(0.57, abs=0.01) and heads[1, 0] == pytest.approx(0.21, abs=0.01)
    assert (duplicates < 0.02).all()
    padded = page["cl"].detect_head(page["loaded"], ["b=7, e=5, b+23=?", "c=3, a=40, 4+c=?"], "duplicate_token",
                                    exclude_padding=False)  # the page's "0.24 and 0.34 from the padding alone"
    assert padded[:, 0].tolist() == pytest.approx([0.24, 0.34], abs=0.005)


def test_nnsight_reads_patches_and_differentiates(transformerlens_page):
    if importlib.util.find_spec("nnsight") is None:
        pytest.skip("nnsight is not installed (the test extra installs it)")
    page = dict(transformerlens_page)
    ((number, code),) = [(n, code) for n, code in enumerate(blocks()) if "nnsight" in code]
    run_block(code, page, page["_folder"], number)
    assert torch.equal(page["pattern"], page["cache"]["blocks.1.attn.hook_pattern"])
    assert page["patched"][:, -1].argmax(-1).tolist() == [30, 7]
    unpatched = page["model"](page["corrupted"])[:, -1].argmax(-1)
    assert unpatched.tolist() != [30, 7]  # the patch, not the prompts, gave the clean answers
    assert page["grad"].shape == (2, 16, 128) and page["grad"][:, -1].norm() > 0
