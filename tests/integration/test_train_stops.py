"""Training ends where ``stop_at`` says, warns of a stall, records its outcome; the remedy's rate."""

from __future__ import annotations

import json

import pytest

from compose_lens.training import outcome
from compose_lens.core.config import ModelConfig, RunConfig, TaskConfig, TrainConfig
from compose_lens.core.errors import ConfigError
from compose_lens.training.train import Trainer, learning_rate

CERTAIN_AT_300 = {"runs": 9, "by_step": [{"step": 300, "not_routed": 6, "never": 6}]}


def never_routes(metrics):
    """The curves read as a stall: addition from the first evaluation, routing never. Whether a
    1,500-step p = 11 model reaches 0.97 on its ~12 held-out pairs is decided by float rounding
    (it does with the native AVX-512 kernels here, not with ATEN_CPU_CAPABILITY=avx2), and these
    tests are about what the trainer does with a stall, not about that model."""
    return {"addition": metrics[0]["step"] if metrics else None, "routing": None, "refinement": None}


@pytest.fixture
def constants_only() -> RunConfig:
    """A p = 11 model that sees no variable in training: it learns addition and can never route."""
    task = TaskConfig(modulus=11, n_vars=6, left_forbidden=("f",), right_forbidden=("a",), f=0.9,
                      variables_in_training=False)
    return RunConfig(task=task, model=ModelConfig.for_task(task, d_model=48, d_head=48, d_mlp=128),
                     train=TrainConfig(steps=1500, batch_size=256, lr=1e-2, weight_decay=0.1, eval_every=100,
                                       checkpoint_every=500, pool_size=64, threads=1))


def test_a_certain_stall_ends_the_run_with_outcome_stalled(tmp_path, constants_only, monkeypatch, capsys):
    monkeypatch.setattr(outcome, "calibration", lambda f=None, r=None, budget=None: CERTAIN_AT_300)
    monkeypatch.setattr(outcome, "onsets", never_routes)
    monkeypatch.setattr(outcome, "WARN_AFTER", 300)
    config = constants_only.with_overrides(["stop_at=stalled"])
    results = Trainer(config, tmp_path / "run", progress=False).run()
    assert results["steps"] < 1500, "the run should have stopped once the stall was certain"
    assert results["outcome"]["outcome"] == "stalled"
    assert json.loads((tmp_path / "run" / "results.json").read_text())["outcome"]["outcome"] == "stalled"
    assert "layer-2 routing has not formed" in capsys.readouterr().err


def test_without_stop_at_the_same_run_trains_its_whole_budget(tmp_path, constants_only, monkeypatch):
    monkeypatch.setattr(outcome, "calibration", lambda f=None, r=None, budget=None: CERTAIN_AT_300)
    monkeypatch.setattr(outcome, "onsets", never_routes)
    results = Trainer(constants_only, tmp_path / "run", progress=False).run()
    assert results["steps"] == 1500 and results["outcome"]["outcome"] == "stalled"


def test_stop_at_generalised_stops_at_the_first_check_that_passes(tmp_path, tiny_config, monkeypatch):
    from compose_lens.training import evaluate

    monkeypatch.setattr(outcome, "GENERALISED", 0.0)  # every model meets a headline of 0
    calls = []
    real = evaluate.make_exhaustive
    monkeypatch.setattr(evaluate, "make_exhaustive", lambda *a, **k: calls.append(1) or real(*a, **k))
    config = tiny_config.with_overrides(["steps=40", "stop_at=generalised"])
    results = Trainer(config, tmp_path / "run", progress=False).run()
    assert results["steps"] == 10  # the first evaluation
    assert len(calls) == 2  # the check's exhaustive sets, which results.json takes as they are (Subject.once)
    assert (tmp_path / "run" / "checkpoints" / "step_000010").is_dir()
    monkeypatch.setattr(outcome, "GENERALISED", 1.01)  # no model does
    results = Trainer(config, tmp_path / "run2", progress=False).run()
    assert results["steps"] == 40


def test_the_remedy_triples_the_rate_and_bad_names_are_refused(tiny_config):
    assert learning_rate(tiny_config.train) == tiny_config.train.lr
    assert learning_rate(tiny_config.with_overrides(["remedy=lr_x3"]).train) == pytest.approx(3 * tiny_config.train.lr)
    with pytest.raises(ConfigError, match="remedy"):
        tiny_config.with_overrides(["remedy=magic"])
    with pytest.raises(ConfigError, match="stop_at"):
        tiny_config.with_overrides(["stop_at=never"])


def test_results_give_the_final_weights_exhaustive_accuracies_after_an_earlier_check(tmp_path, tiny_config):
    """A stop check that evaluates the exhaustive sets and does not end the run is read no more once training
    goes on: the trainer's fused AdamW writes the weights in place, leaving torch's version counters alone."""
    from compose_lens.training.evaluate import exhaustive_accuracies
    from compose_lens.training.subject import final_model

    early = []
    config = tiny_config.with_overrides(["steps=40"])
    results = Trainer(config, tmp_path / "run", progress=False).run(
        on_step=lambda trainer: early or early.append(exhaustive_accuracies(trainer.subject)))
    final = exhaustive_accuracies(final_model(tmp_path / "run")[0])
    assert early[0] != final  # the weights moved: a result kept from the first step would differ
    assert results["exhaustive"] == final
