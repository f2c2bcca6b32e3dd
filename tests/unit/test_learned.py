"""evaluate.learned: what one model has learned, from its answers, and the gates that read it
(issue 53: roles are located, and the same-MLP verdict can be 'supported', only in a model that binds)."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest
import torch

from compose_lens.training.subject import load_model
from compose_lens.training import evaluate
from compose_lens.analysis import locate
from compose_lens.registry.same_mlp import comparisons as same_mlp
from compose_lens.data.sampler import make_pool
from compose_lens.core.errors import ComposeLensError

ROOT = Path(__file__).resolve().parents[2]
spec = importlib.util.spec_from_file_location("zoo_planted", ROOT / "experiments" / "zoo_planted.py")
zoo_planted = importlib.util.module_from_spec(spec)
spec.loader.exec_module(zoo_planted)


@pytest.fixture(scope="module")
def paper():
    try:
        return load_model("paper")
    except ComposeLensError:
        pytest.skip("the paper model is not installed")


def test_picking_counts_the_context_values_that_give_the_answer(tiny_config, tiny_split):
    """Two 1-var prompts by hand: picking is the share of the context's values whose sum is the answer."""
    task = tiny_config.task
    n, v = task.seq_len, task.first_var_token
    a, b, c = v, v + 1, v + 2
    pad, plus, eq = task.pad_token, task.plus_token, task.equals_token
    context = [a, 3, b, 3, c, 1] + [pad] * (task.context_len - 6)
    first = torch.tensor([context + [plus, a, 2, eq]])  # a = 3: two of three values give 3 + 2
    second = torch.tensor([[a, 4] + [pad] * (task.context_len - 2) + [plus, 1, a, eq]])  # the only value: 1 of 1
    tokens = torch.cat([first, second])
    assert tokens.shape[1] == n
    labels = task.answer(torch.tensor([3, 1]), torch.tensor([2, 4]))
    assert evaluate.picking_accuracy(tiny_config, tokens, labels) == pytest.approx((2 / 3 + 1) / 2)


def test_the_paper_model_binds_and_the_study_step_3001_does_not(paper, reference_dir):
    knows = evaluate.learned(paper)
    assert knows.state == "binds" and knows.binding.fraction > 0.98
    early = load_model(reference_dir / "step_3001.pth")  # before the study's routing formed (~5,000)
    found = evaluate.learned(early)
    assert found.state == "operation only", found.line()
    assert abs(found.binding.fraction - found.picking) < 0.1  # the stall signature: near picking, far from 1
    assert "stall signature" in found.line()


def test_evaluate_and_learned_read_the_same_pools(paper):
    """learned() at its defaults reads compose-lens evaluate's pools: the same numbers."""
    knows = evaluate.learned(paper)
    pool = make_pool(paper.split, "0var_train", evaluate.POOL_SIZE, 0)
    from compose_lens.training.evaluate import accuracy
    assert knows.operation.fraction == pytest.approx(accuracy(paper.model, paper.config.model, pool))


def test_decoy_heads_are_not_located_and_the_real_ones_are(paper):
    """Decoys attend exactly like the binder and router (same queries and keys) but write nothing: an
    attention score alone ties them, and the old locator took the first head, the decoy."""
    subject, truth = zoo_planted.decoy_heads(paper)
    found = locate.locate(subject)
    assert found.binder.component == truth["truth_binder"] == "blocks.0 head 1"
    assert found.router.component == truth["truth_router"] == "blocks.1 head 1"
    scores = found.candidates.set_index(["role", "component"])["score"]
    assert scores[("router", "blocks.1 head 0")] == pytest.approx(scores[("router", "blocks.1 head 1")])
    falls = found.candidates.set_index(["role", "component"])["causal"]
    assert falls[("router", "blocks.1 head 0")] == pytest.approx(0.0, abs=1e-9)


def test_no_role_is_located_in_a_model_that_cannot_bind(paper):
    subject, _ = zoo_planted.no_binder(paper, "zero")
    found = locate.locate(subject)
    assert found.binder.component is None and found.router.component is None
    assert "has not learned binding" in found.router.line()


def test_same_mlp_is_inconclusive_without_competence_and_names_it(reference_dir):
    """The study at step 3001 adds constants but answers no variable: inconclusive, naming the sets, and
    no test run (on the old code its tests ran and one of them failed: 'not supported')."""
    early = load_model(reference_dir / "step_3001.pth")
    report = same_mlp.same_mlp_report(early, n=100)
    assert report["verdict"] == "inconclusive"
    assert "does not answer the prompts the tests are about" in report["verdict_reason"]
    assert "1-var left" in report["verdict_reason"] and report["tables"].keys() == {"competence"}


def test_gated_adders_compute_the_paper_function_with_two_adders(paper):
    """The planted same-MLP negative: the paper's answers, constants added by one MLP and variables by another."""
    subject, truth = zoo_planted.gated_adders(paper)
    pool = make_pool(paper.split, "1var_train", 200)
    zero = make_pool(paper.split, "0var_train", 200)
    with torch.no_grad():
        for batch in (pool, zero):
            assert torch.equal(subject.model(batch.tokens)[:, -1].argmax(-1), paper.model(batch.tokens)[:, -1].argmax(-1))
        mlps = {}
        for block in (1, 2):
            _, cache = subject.model.run_with_cache(torch.cat([pool.tokens, zero.tokens]),
                                                    names_filter=f"blocks.{block}.hook_mlp_out")
            mlps[block] = cache[f"blocks.{block}.hook_mlp_out"][:, -1].norm(dim=-1)
    assert (mlps[1][:200] == 0).all() and (mlps[1][200:] > 0).all()  # blocks.1.mlp: constants only
    assert (mlps[2][200:] == 0).all() and (mlps[2][:200] > 0).all()  # blocks.2.mlp: variables only
    assert truth["truth_same_mlp"] == "no"


def test_the_reports_learned_banner_is_escaped_and_boxed_as_a_warning_where_the_model_does_not_bind():
    """The report opens with what the model has learned (report.learned_banner, from the learned.html
    template): every line escaped as text, the box a warning where the model does not bind, nothing where
    nothing was measured."""
    from types import SimpleNamespace

    from compose_lens.report import learned_banner

    def inputs(binds, learned=True):
        knows = SimpleNamespace(binds=binds, line=lambda: "learned: x < y & <b>not</b>") if learned else None
        roles = [SimpleNamespace(line=lambda: "binder: blocks.0 <head 0>")]
        return SimpleNamespace(context=SimpleNamespace(plan=[SimpleNamespace(learned=knows, roles=lambda: roles)]))

    shown = learned_banner(inputs(binds=False))
    assert shown.startswith('<div class="learned" style="border:2px solid #b2182b')
    assert "learned: x &lt; y &amp; &lt;b&gt;not&lt;/b&gt;" in shown and "<b>not</b>" not in shown
    assert "<li>binder: blocks.0 &lt;head 0&gt;</li>" in shown
    assert "#b2182b" not in learned_banner(inputs(binds=True))
    assert learned_banner(inputs(binds=True, learned=False)) == ""
