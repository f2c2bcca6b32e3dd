"""A researcher's own TransformerLens model and task: the map onto the study's coordinates is exact.

The model here is built with TransformerLens alone (``TransformerBridge.boot_native``, random
weights, biases switched on), on a task that differs from the study's in every way a declaration
can say: a shuffled vocabulary with an unused id, an infix query, subtraction, the whole vocabulary
as output, two heads and an MLP in both blocks. Each check would fail if one index of the map
were wrong (a swapped position, a wrong answer row, the causal mask left as it was).
"""

from __future__ import annotations

import dataclasses
import json

import pytest
import torch

from compose_lens.data.sampler import make_pools
from compose_lens.data.declaration import NOTHING_HELD_OUT, DeclarationError, TaskDeclaration, study_declaration
from compose_lens.core.errors import ComposeLensError
from compose_lens.training.evaluate import answer_logits
from compose_lens.training.subject import load_subject, model_of

P, N_VARS, VOCAB = 7, 5, 20


def declaration(query: str = "infix", output: str = "vocab") -> TaskDeclaration:
    gen = torch.Generator().manual_seed(3)
    ids = torch.randperm(VOCAB, generator=gen).tolist()  # numbers, variables, op, =, PAD, one unused id
    return TaskDeclaration(modulus=P, numbers=tuple(ids[:P]), variables=tuple(ids[P:P + N_VARS]),
                           operator=ids[12], equals=ids[13], pad=ids[14], vocab_size=VOCAB,
                           variable_names=("x1", "x2", "x3", "x4", "x5"), seq_len=12, max_assignments=3,
                           query=query, operation="subtract", output=output, f=0.6, seed=1)


def user_model(decl: TaskDeclaration, n_ctx: int = 12):
    from transformer_lens.config import TransformerBridgeConfig
    from transformer_lens.model_bridge import TransformerBridge
    from transformer_lens.model_bridge.sources import native  # noqa: F401  (registers boot_native)

    cfg = TransformerBridgeConfig(n_layers=2, d_model=32, d_head=8, n_heads=2, d_mlp=64, act_fn="relu",
                                  normalization_type=None, n_ctx=n_ctx, d_vocab=VOCAB,
                                  d_vocab_out=decl.d_vocab_out, positional_embedding_type="standard",
                                  architecture="TransformerLensNative", seed=0)
    model = TransformerBridge.boot_native(cfg)
    with torch.no_grad():
        for name, value in model.named_parameters():
            if name.endswith("bias"):
                value.normal_(0, 0.3)  # biases on, so the answer rows of b_U matter too
    return model.eval()


def user_logits(model, decl: TaskDeclaration, study_tokens: torch.Tensor) -> torch.Tensor:
    """The researcher's model on the researcher's tokens, at the answers 0..p-1."""
    with torch.no_grad():
        return model(decl.to_user(study_tokens))[:, -1][:, decl.answer_rows]


@pytest.mark.parametrize("query, output", [("infix", "vocab"), ("prefix", "numbers")])
def test_a_researchers_model_reads_the_same_in_the_study_coordinates(query, output):
    decl = declaration(query, output)
    model = user_model(decl)
    tokens = torch.cat([b.tokens for b in make_pools(decl.split(), size=40).values()])
    want = user_logits(model, decl, tokens)
    subject = load_subject(model, decl)
    weights = model_of(subject.config, subject.model.state_dict(), "test", bridge=False)
    for forward in (subject.model, weights):  # the bridge's hooks and the fast forwards
        got = answer_logits(forward, subject.config.model, tokens)
        torch.testing.assert_close(got, want, atol=1e-5, rtol=1e-5)
    assert subject.config.model.n_heads == 2 and subject.config.model.mlp_blocks == (0, 1)
    assert (subject.config.model.read_order is None) == (query == "prefix")


def test_every_position_of_an_infix_model_is_the_researchers():
    """The residual stream at every position, not only the answer: the causal mask is the researcher's."""
    decl = declaration()
    model = user_model(decl)
    subject = load_subject(model, decl)
    tokens = make_pools(decl.split(), size=8)["2var_train"].tokens
    _, mine = subject.model.run_with_cache(tokens)
    _, theirs = model.run_with_cache(decl.to_user(tokens))
    order = list(decl.positions)
    torch.testing.assert_close(mine["blocks.1.hook_resid_post"], theirs["blocks.1.hook_resid_post"][:, order],
                               atol=1e-5, rtol=1e-5)


def test_a_model_directory_and_its_task_file(tmp_path):
    from safetensors.torch import save_file

    decl = declaration()
    model = user_model(decl)
    save_file({k: v.contiguous() for k, v in model.state_dict().items()}, str(tmp_path / "model.safetensors"))
    cfg = {k: getattr(model.cfg, k) for k in ("n_layers", "d_model", "d_head", "n_heads", "d_mlp", "act_fn",
                                              "normalization_type", "n_ctx", "d_vocab", "d_vocab_out",
                                              "positional_embedding_type")}
    (tmp_path / "config.json").write_text(json.dumps(cfg))
    with pytest.raises(DeclarationError, match="needs its task declared"):
        load_subject(tmp_path)
    decl.write(tmp_path / "task.json")
    assert TaskDeclaration.load(tmp_path / "task.json") == decl
    subject = load_subject(tmp_path)
    tokens = make_pools(decl.split(), size=16)["1var_add_restricted"].tokens
    torch.testing.assert_close(answer_logits(subject.model, subject.config.model, tokens),
                               user_logits(model, decl, tokens), atol=1e-5, rtol=1e-5)


def test_the_study_is_the_default_declaration():
    from compose_lens.core.config import TaskConfig

    decl = study_declaration()
    assert decl.task == TaskConfig()
    assert torch.equal(decl.token_ids, torch.arange(TaskConfig().d_vocab))
    assert decl.positions == tuple(range(16)) and decl.split().heldout_pairs.equal(
        load_subject("paper").split.heldout_pairs)


def test_declared_heldout_pairs_are_the_split():
    decl = TaskDeclaration.from_dict({**declaration().to_dict(), "split": {"heldout_pairs": [[0, 1], [2, 3]]}})
    split = decl.split()
    assert sorted(map(tuple, split.heldout_pairs.tolist())) == [(0, 1), (2, 3)]
    assert len(split.train_pairs) == P * P - 2


def test_a_relative_split_file_is_read_beside_its_task_file(tmp_path, monkeypatch):
    """A task file's relative split_file travels with it: read from the task file's folder, wherever the
    command runs (issue #59: it was looked up from the working directory, and the refusal named neither)."""
    split = declaration().split()
    (tmp_path / "model").mkdir()
    split.save(tmp_path / "model" / "split.json")
    data = {**declaration().to_dict(), "split_file": "split.json"}
    data.pop("split")
    (tmp_path / "model" / "task.json").write_text(json.dumps(data))
    monkeypatch.chdir(tmp_path)  # not the task file's folder
    loaded = TaskDeclaration.load(tmp_path / "model" / "task.json").split()
    assert torch.equal(loaded.heldout_pairs, split.heldout_pairs)
    (tmp_path / "model" / "split.json").unlink()
    with pytest.raises(DeclarationError, match="split.json': no such file at .*model/split.json .*the task file's"):
        TaskDeclaration.load(tmp_path / "model" / "task.json")


@pytest.mark.parametrize("change, message", [
    ({"numbers": [0, 1]}, "2 ids for modulus 7"),
    ({"operator": "pad"}, "two roles"),  # the operator given PAD's id
    ({"query": "postfix"}, "use prefix"),
    ({"colour": 1}, "unknown key"),
    ({"split": {"f": 2}}, "f=2"),
    ({"split": {"held": 1}}, "unknown split key"),
])
def test_a_bad_declaration_is_one_line(change, message):
    data = {**declaration().to_dict(), **change}
    if data["operator"] == "pad":
        data["operator"] = data["pad"]
    with pytest.raises(DeclarationError, match=message) as info:
        TaskDeclaration.from_dict(data, "task.json")
    assert "\n" not in str(info.value) and str(info.value).startswith("task.json")


def test_a_model_that_does_not_fit_its_declaration_is_refused():
    decl = declaration()
    model = user_model(declaration(output="numbers"))  # 7 outputs, the declaration says the vocabulary
    with pytest.raises(ComposeLensError, match="d_vocab_out=7"):
        load_subject(model, decl)


def test_a_model_trained_on_every_pair_declares_split_none(tmp_path, capsys):
    """``"split": "none"``: every pair and every operand slot in training. The pools that would test what
    was held out are absent, said so with why (the held-out pools drew from no pair and crashed), and
    evaluate and the analyses run on the training pools."""
    from compose_lens.cli import main
    from compose_lens.report.context import run_analysis
    from compose_lens.data.sampler import absent_pools, make_pool
    from safetensors.torch import save_file

    decl = TaskDeclaration.from_dict({**declaration().to_dict(), "split": "none"}, "task.json")
    assert decl.holds_out_nothing and decl.to_dict()["split"] == "none"
    in_python = dataclasses.replace(declaration(), f=None, **NOTHING_HELD_OUT)  # the same, said in Python (no f:
    # nothing is drawn with it; f beside the pairs is refused, as it would be ignored)
    assert in_python.holds_out_nothing and in_python.to_dict()["split"] == "none"
    split = decl.split()
    assert len(split.train_pairs) == P * P and len(split.heldout_pairs) == 0
    assert split.is_train.all() and decl.task.left_forbidden == decl.task.right_forbidden == ()
    absent = absent_pools(split)
    assert sorted(make_pools(split, size=8)) == ["0var_train", "1var_train", "2var_train"]
    assert len(absent) == 6 and absent["0var_add_restricted"] == "the split holds out no addition pair"
    with pytest.raises(ComposeLensError, match="pool 1var_var_restricted: no variable is forbidden") as info:
        make_pool(split, "1var_var_restricted", 8)
    assert "\n" not in str(info.value)

    model = user_model(decl)
    save_file({k: v.contiguous() for k, v in model.state_dict().items()}, str(tmp_path / "model.safetensors"))
    cfg = {k: getattr(model.cfg, k) for k in ("n_layers", "d_model", "d_head", "n_heads", "d_mlp", "act_fn",
                                              "normalization_type", "n_ctx", "d_vocab", "d_vocab_out")}
    (tmp_path / "config.json").write_text(json.dumps(cfg))
    decl.write(tmp_path / "task.json")
    assert main(["evaluate", str(tmp_path), "--exhaustive", "--pool-size", "16", "--json"]) == 0
    said = json.loads(capsys.readouterr().out)
    assert sorted(said["pools"]) == ["0var_train", "1var_train", "2var_train"] and said["absent_pools"] == absent
    assert sorted(said["absent_exhaustive"]) == ["two_var_union", "zero_var_heldout"]
    subject = load_subject(tmp_path)
    result = run_analysis("ablation", subject, pool_size=8)
    assert set(result.tables["ablation"]["pool"]) == {"0var_train", "1var_train", "2var_train"}
    # modularity is gated on the exhaustive sets; empty, they are not read as "not learned (nan)"
    from compose_lens.registry.modularity import measures as modularity

    row = modularity.measure(subject, n_pairs=12)
    assert row["modularity_reason"].startswith("the split holds out nothing")


@pytest.mark.parametrize("split", ["all", "None", ["none"]])
def test_a_split_that_is_neither_none_nor_an_object_is_one_line(split):
    with pytest.raises(DeclarationError, match='use "none"') as info:
        TaskDeclaration.from_dict({**declaration().to_dict(), "split": split}, "task.json")
    assert "\n" not in str(info.value) and str(info.value).startswith("task.json: split=")


def test_a_split_that_holds_nothing_out_is_analysed_not_trained(tiny_config, tmp_path):
    """Training tracks the held-out pools; on a split without them it stopped in an internal error
    (randint over no pair, then a KeyError) after making the run's folder. Now one line, no folder."""
    from compose_lens.data.split import Split
    from compose_lens.training.train import Trainer

    split = Split.from_heldout(tiny_config.task, torch.zeros(0, 2, dtype=torch.long))
    with pytest.raises(ComposeLensError, match="the split has no 0var_add_restricted") as info:
        Trainer(tiny_config, tmp_path / "run", split=split, progress=False)
    assert "\n" not in str(info.value) and not (tmp_path / "run").exists()


def test_the_exhaustive_accuracies_are_evaluated_once_until_a_weight_changes(tiny_config, tiny_split, monkeypatch):
    from compose_lens.model import tl
    from compose_lens.training import evaluate
    from compose_lens.training.subject import Subject

    weights = model_of(tiny_config, tl.parameters(tl.boot(tiny_config.model)), "untrained", bridge=False)
    subject = Subject(weights, tiny_config, tiny_split, "untrained")
    calls = []
    real = evaluate.correct_mask
    monkeypatch.setattr(evaluate, "correct_mask", lambda *a, **k: calls.append(1) or real(*a, **k))
    first = evaluate.exhaustive_accuracies(subject)
    assert evaluate.exhaustive_accuracies(subject) == first and len(calls) == 2  # one per exhaustive set
    with torch.no_grad():
        tl.parameters(subject.model)["unembed.weight"].mul_(-1.0)  # changed in place: evaluated anew
    again = evaluate.exhaustive_accuracies(subject)
    assert len(calls) == 4 and again != first
    # the trainer's step: its fused AdamW writes the weights in place and leaves torch's version counters alone
    trained = list(tl.parameters(subject.model).values())
    versions = [t._version for t in trained]
    for t in trained:
        t.grad = torch.ones_like(t)
    torch.optim.AdamW(trained, lr=1.0, fused=True).step()
    assert [t._version for t in trained] == versions  # what a cache keyed by the counters would not see
    assert evaluate.exhaustive_accuracies(subject) != again and len(calls) == 6


def test_the_composition_gate_says_why_below_the_headline_and_nothing_at_or_above_it(paper):
    """The same-MLP and modularity gate, on the paper model's exhaustive accuracies (0.994 and 0.993): it
    composes at the study's 0.98; asked for more than its 2-var accuracy, it does not, and says why."""
    from compose_lens.training import evaluate

    two_var = evaluate.exhaustive_accuracies(paper)["two_var_union"]["accuracy"]
    assert evaluate.composition_gap(paper) is None
    assert evaluate.composition_gap(paper, at=two_var) is None
    why = evaluate.composition_gap(paper, at=two_var + 1e-4)
    assert why.startswith("the model has not learned to compose") and f"2-var union {two_var:.3f}" in why
