"""The example of docs/transformerlens.md runs as printed: TransformerLens's own
``patching.get_act_patch_resid_pre`` on the paper model with a user metric, and its numbers are
compose-lens's own patch of the same pairs, sites and metric."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import torch

from compose_lens.data.pairs import PromptPairs
from compose_lens.data.task import decode
from compose_lens.registry.patching import tables

PAGE = Path(__file__).resolve().parents[3] / "docs" / "transformerlens.md"
HEADING = "## TransformerLens's own patching on a compose-lens model"


def example_code() -> str:
    """The first python block under the heading (the one code the page shows and the test runs)."""
    text = PAGE.read_text()
    assert HEADING in text, f"{PAGE.name} lost its section {HEADING!r}"
    block = re.search(r"```python\n(.*?)```", text.split(HEADING, 1)[1], re.S)
    assert block, f"no python block under {HEADING!r}"
    return block.group(1)


@pytest.fixture(scope="module")
def example() -> dict:
    namespace: dict = {"__name__": "docs_transformerlens"}
    exec(compile(example_code(), str(PAGE), "exec"), namespace)  # noqa: S102 - our own page
    return namespace


def test_the_example_agrees_with_compose_lens_patching(example):
    model, loaded = example["model"], example["loaded"]
    tl_result = example["tl_result"]
    assert tl_result.shape == (loaded.config.model.n_layers, loaded.config.model.n_ctx)
    # the comparison can tell sites apart: some restore the clean answer, most leave the corrupted one
    assert float(tl_result.max()) > 0.9 and float(tl_result.min()) < 0.1
    clean, corrupted, answers = example["clean"], example["corrupted"], example["clean_answers"]
    corrupted_answers = torch.tensor([decode(loaded.split.task, row).label for row in corrupted.tolist()])
    pairs = PromptPairs(clean, corrupted, answers, corrupted_answers, "docs")
    sites = tables.all_sites(loaded.config.model, ["resid_pre"])
    ours = tables.patched_values(model, loaded.config.model, pairs, sites, metric="prob").mean(1)
    assert torch.allclose(ours.view_as(tl_result), tl_result.float(), atol=1e-5)
    # and the table the page prints, normalised between the two unpatched runs
    table = example["table"]
    clean_prob, corrupted_prob = table["clean_prob"].iloc[0], table["corrupted_prob"].iloc[0]
    normalised = (table["prob"] - corrupted_prob) / (clean_prob - corrupted_prob)
    assert torch.allclose(torch.tensor(normalised.values), torch.tensor(table["mean"].values), atol=1e-5)
