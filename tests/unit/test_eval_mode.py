"""Every model loader of :mod:`compose_lens.training.subject` returns its model in eval mode: TransformerLens's
patching and ``fit_das`` refuse a model in train mode."""

from __future__ import annotations

from compose_lens.core.files import write_json_atomic
from compose_lens.model import tl
from compose_lens.training.runs import CHECKPOINTS_DIR, CONFIG_FILE, checkpoint_name, save_model
from compose_lens.training.subject import for_analyses, load_checkpoint, load_model, load_model_dir, with_bridge


def test_paper_model_loads_in_eval_mode():
    bridge = load_model("paper")  # bridge=True is the default
    assert not isinstance(bridge.model, tl.Weights)
    assert bridge.model.training is False
    weights = load_model("paper", bridge=False)
    assert isinstance(weights.model, tl.Weights) and weights.model.training is False
    assert with_bridge(weights).model.training is False
    assert for_analyses(weights).model.training is False


def test_directory_and_checkpoint_loaders_give_eval_mode(tmp_path, tiny_config):
    model = tl.boot(tiny_config.model, task=tiny_config.task)
    assert model.training  # a freshly booted bridge is in train mode: the loaders must switch it
    save_model(model, tiny_config, tmp_path / "run")
    save_model(model, tiny_config, tmp_path / "run" / CHECKPOINTS_DIR / checkpoint_name(10))
    write_json_atomic(tmp_path / "run" / CONFIG_FILE, tiny_config.to_dict())
    assert load_model_dir(tmp_path / "run")[0].training is False
    assert load_model(tmp_path / "run").model.training is False
    assert load_model(tmp_path / "run" / "model.safetensors").model.training is False
    assert load_checkpoint(tmp_path / "run", 10).model.training is False


def test_study_checkpoint_loads_in_eval_mode(reference_dir):
    assert load_model(reference_dir / "step_1.pth").model.training is False
    assert load_model(reference_dir / "step_1.pth", bridge=False).model.training is False
