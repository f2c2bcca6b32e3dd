"""The answer lens on the shipped paper model, and its folder reaching every door (the folder's own tests:
``make test`` collects them here, beside the code they test)."""

from __future__ import annotations

import pytest
import torch

import compose_lens
from compose_lens import registry
from compose_lens.data.sampler import make_pools
from compose_lens.registry.answer_lens.lens import answer_lens, first_stage_on_top

POOL_SIZE = 60


@pytest.fixture(scope="module")
def table(paper):
    return answer_lens(paper, POOL_SIZE, seed=3)


def test_after_the_last_layer_the_lens_gives_the_models_own_answers(paper, table):
    """The last stage reads the stream the unembedding reads: its top-1 rate is the model's accuracy on the same
    sequences, pool by pool (a lens that read another site or another position would differ)."""
    last = table[table["stage"] == f"after layer {paper.config.model.n_layers}"].set_index("pool")
    for pool, batch in make_pools(paper.split, POOL_SIZE, 3).items():
        accuracy = (paper.forward.logits(batch.tokens).argmax(-1) == batch.labels).float().mean().item()
        assert last.loc[pool, "top1"] == pytest.approx(accuracy)
        assert last.loc[pool, "low"] <= accuracy <= last.loc[pool, "high"]


def test_in_the_study_model_the_answer_is_made_by_the_last_layer_only(table):
    """Nothing adds before layer 2's MLP in the study's architecture: before the last layer the answer is on top
    about as often as chance would put it there (1/59), after it nearly always, and its margin turns positive."""
    ordered = table.sort_values("order")
    before, after = ordered[ordered["order"] < ordered["order"].max()], ordered[ordered["order"] == ordered["order"].max()]
    assert before["top1"].max() < 0.2 and (before["margin"] < 0).all()
    assert after["top1"].min() > 0.9 and (after["margin"] > 0).all()
    assert set(first_stage_on_top(table).values()) == {"after layer 2"}


def test_an_untrained_model_has_its_answer_on_top_nowhere(paper):
    """The same lens on the paper's architecture with fresh weights: no stage reaches a top-1 rate of one half."""
    from compose_lens.model import tl

    torch.manual_seed(0)
    fresh = compose_lens.Subject(tl.boot(paper.config.model), paper.config, paper.split, "fresh weights")
    assert set(first_stage_on_top(answer_lens(fresh, 20, seed=0)).values()) == {None}


def test_the_folder_alone_reaches_the_command_analyze_the_report_and_the_api(tmp_path):
    """Nothing outside this folder names the answer lens, yet every door has it."""
    from compose_lens.cli import build_parser, main
    from compose_lens.report import sections

    declared = registry.by_name(registry.ANALYSES, "answer_lens")
    assert declared is registry.ANSWER_LENS and declared.in_analyze
    assert build_parser().parse_args(["answer-lens", "paper", "--out", "o"]).pool_size == 200
    assert "answer_lens" in [anchor for anchor, _, _ in sections()]
    assert compose_lens.answer_lens is answer_lens
    assert main(["answer-lens", "paper", "--out", str(tmp_path), "--pool-size", "10", "--quiet"]) == 0
    assert len((tmp_path / "answer_lens.csv").read_text().splitlines()) == 1 + 9 * 3
    assert (tmp_path / "figures" / "answer_lens.png").stat().st_size > 0
