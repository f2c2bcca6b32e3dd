"""Activation patching: self-patching is a no-op, other inputs change the output,
the batched engines equal transformer_lens.patching, and the table's statistics."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest
import torch

from compose_lens.core import capabilities
from compose_lens.data import pairs as prompt_pairs
from compose_lens.model import tl
from compose_lens.registry.patching import tables
from compose_lens.data.task import decode, parse_sequence
from compose_lens.training.subject import Subject

# the reference, transformer_lens.patching one forward per site, as experiments/bench_patching.py times it
_SPEC = importlib.util.spec_from_file_location("tl_patching", Path(__file__).parents[3] / "experiments" / "tl_patching.py")
tl_patching = importlib.util.module_from_spec(_SPEC)
_SPEC.loader.exec_module(tl_patching)


@pytest.fixture
def tiny_model(tiny_config):
    return tl.boot(tiny_config.model)


@pytest.mark.parametrize("corruption", prompt_pairs.CORRUPTIONS)
def test_prompt_pairs_edit_one_token_and_change_the_answer(tiny_split, corruption):
    pairs = prompt_pairs.make_prompt_pairs(tiny_split, 30, corruption, seed=1)
    assert ((pairs.clean != pairs.corrupted).sum(1) == 1).all()
    assert (pairs.clean_labels != pairs.corrupted_labels).all()
    for row, label in zip(pairs.corrupted.tolist(), pairs.corrupted_labels.tolist()):
        assert decode(tiny_split.task, row).label == label


def test_patching_a_site_with_its_own_activation_changes_nothing(tiny_model, tiny_config, tiny_split):
    pairs = prompt_pairs.make_prompt_pairs(tiny_split, 12, "value")
    same = prompt_pairs.PromptPairs(pairs.corrupted, pairs.corrupted, pairs.clean_labels,
                                pairs.corrupted_labels, "self")
    sites = tables.all_sites(tiny_config.model)
    _, unpatched = tables.baseline_logit_diffs(tiny_model, same)
    for values in (tables.patched_values(tiny_model, tiny_config.model, same, sites),
                   tables.patched_values(tiny_model, tiny_config.model, same, sites, fast=False)):
        assert torch.allclose(values, unpatched.expand_as(values), atol=1e-5)


def test_patching_with_another_input_changes_the_output(tiny_model, tiny_config, tiny_split):
    pairs = prompt_pairs.make_prompt_pairs(tiny_split, 12, "constant")
    sites = tables.all_sites(tiny_config.model)
    values = tables.patched_values(tiny_model, tiny_config.model, pairs, sites)
    clean, corrupted = tables.baseline_logit_diffs(tiny_model, pairs)
    fast = tables.baseline_logit_diffs(tiny_model, pairs, tiny_config.model)  # the table forward
    assert torch.allclose(fast[0], clean, atol=1e-5) and torch.allclose(fast[1], corrupted, atol=1e-5)
    final = sites.index(tables.patch_site("resid_post", 1, tiny_config.model.n_ctx - 1))
    assert torch.allclose(values[final], clean, atol=1e-5)  # the whole last residual: the clean run
    assert not torch.allclose(clean, corrupted, atol=1e-3)
    moved = (values - corrupted).abs().amax(1)
    assert (moved > 1e-4).sum() >= 4


@pytest.mark.parametrize("changes", [{}, dict(n_heads=2, d_head=16, trained_biases=True)])
def test_batched_patching_equals_transformer_lens(tiny_config, tiny_split, changes):
    cfg = tiny_config.model.replace(**changes)
    model = tl.boot(cfg)
    torch.manual_seed(0)
    with torch.no_grad():  # off the initialisation: every weight and bias matters
        for name, value in tl.parameters(model).items():
            if name.endswith("bias") and changes and "blocks.0.mlp" not in name:
                value.normal_(0, 0.3)
            elif name.endswith("weight") and "blocks.0.mlp" not in name:
                value.mul_(3.0)
    pairs = prompt_pairs.make_prompt_pairs(tiny_split, 10, "variable")
    sites, reference = tl_patching.transformer_lens_logit_diffs(model, cfg, pairs)
    engine = tables.patched_values(model, cfg, pairs, sites, chunk=4)
    hooks = tables.patched_values(model, cfg, pairs, sites, fast=False)
    assert capabilities.supports(cfg, "patching")
    assert (reference - reference[:1]).abs().amax() > 0.1  # the sites differ
    tolerance = 1e-5 * float(reference.abs().amax())  # float32 rounding at this scale
    assert (engine - reference).abs().amax() < tolerance
    assert (hooks - reference).abs().amax() < tolerance


def test_patching_table_statistics(tiny_model, tiny_config, tiny_split):
    table = tables.patching_table(Subject(tiny_model, tiny_config, tiny_split, "test"), n_pairs=20, n_boot=200, by="position")
    assert {"component", "layer", "block", "position", "mean", "ci_low", "ci_high"} <= set(table.columns)
    assert len(table) == len(tables.all_sites(tiny_config.model))
    assert (table["layer"] == table["block"] + 1).all()  # the paper's layer number beside blocks.N
    assert (table["ci_low"] <= table["mean"] + 1e-6).all() and (table["mean"] <= table["ci_high"] + 1e-6).all()
    last = table[(table.component == "resid_post") & (table.block == 1) & (table.role == "=")]
    assert last["mean"].iloc[0] == pytest.approx(1.0, abs=1e-4)


def test_roles_name_what_each_position_holds(tiny_split):
    task = tiny_split.task
    row = parse_sequence(task, "PAD b 3 PAD e 5 c 1 PAD PAD PAD PAD + b 4 =")
    roles = prompt_pairs.position_roles(task, torch.tensor([row]))[0].tolist()
    assert [prompt_pairs.ROLES[r] for r in roles] == [
        "PAD", "queried var", "queried value", "PAD", "distractor var", "distractor value",
        "distractor var", "distractor value", "PAD", "PAD", "PAD", "PAD", "+", "left operand", "right operand", "="]


def test_role_table_averages_the_position_table(tiny_model, tiny_config, tiny_split):
    """A query role is one fixed position, so its row equals that position's row; every role row
    averages over the prompts that have the role."""
    kwargs = dict(n_pairs=30, n_boot=50, corruption="value")
    by_role = tables.patching_table(Subject(tiny_model, tiny_config, tiny_split, "test"), by="role", **kwargs)
    by_position = tables.patching_table(Subject(tiny_model, tiny_config, tiny_split, "test"), by="position", **kwargs)
    assert set(by_role["role"]) <= set(prompt_pairs.ROLES) and "queried value" in set(by_role["role"])
    key = ["component", "block", "head", "role"]
    joined = by_role.merge(by_position[by_position.role.isin(prompt_pairs.QUERY_ROLES)], on=key)
    assert len(joined) > 0 and (joined["mean_x"] - joined["mean_y"]).abs().max() < 1e-5
    queried = by_role[by_role.role == "queried value"]
    assert (queried["n_prompts"] == 30).all() and (queried["positions_per_prompt"] == 1).all()


def test_unknown_corruption_is_refused(tiny_split):
    from compose_lens.core.errors import ComposeLensError

    with pytest.raises(ComposeLensError, match="corruption"):
        prompt_pairs.make_prompt_pairs(tiny_split, 10, "colour")


def test_reference_operand_positions_carry_a_changed_constant(reference_final):
    """On the study's model, a changed constant operand lives at its query position (13 or 14)
    before layer 1: patching those two positions of blocks.0.hook_resid_pre restores most of it."""
    loaded = reference_final
    table = tables.patching_table(loaded, n_pairs=120,
                                    corruption="constant", components=("resid_pre",), n_boot=200, by="position")
    first = table[(table.block == 0)].set_index("role")["mean"]
    assert first["left operand"] + first["right operand"] > 0.8
    context = table[(table.block == 0) & (table.role == "context")]["mean"].abs()
    assert context.max() < 0.1


def test_patch_and_ablate_commands_write_plain_csv_with_provenance_beside(tiny_model, tiny_config, tmp_path,
                                                                           capsys):
    """`patch` (by role and by position) and `ablate` write a CSV pandas reads as it is, a
    .provenance.json beside it that records the command line, and the figure in --format."""
    import json

    import pandas as pd

    from compose_lens.cli import main
    from compose_lens.training.runs import save_model

    save_model(tiny_model, tiny_config, tmp_path / "model")
    model = str(tmp_path / "model")
    assert main(["patch", model, "--n-pairs", "12", "--out", str(tmp_path / "p"), "--quiet"]) == 0
    assert main(["patch", model, "--n-pairs", "12", "--by", "position", "--format", "svg",
                 "--out", str(tmp_path / "q"), "--quiet"]) == 0  # one output folder per call
    assert main(["ablate", model, "--pool-size", "8", "--format", "pdf", "--out", str(tmp_path / "a"),
                 "--quiet"]) == 0
    # each command writes what analyze writes in OUT/<name>/: the same stems, figures under figures/
    for stem, figure in (("p/patching", "png"), ("q/patching", "svg"), ("a/ablation", "pdf")):
        csv = tmp_path / f"{stem}.csv"
        assert not csv.read_text().startswith("#")
        table = pd.read_csv(csv)
        assert {"layer", "block"} <= set(table.columns)
        record = json.loads((tmp_path / f"{stem}.provenance.json").read_text())
        assert record["config"] == tiny_config.to_dict() and record["command"].startswith("compose-lens ")
        folder, name = stem.split("/")
        assert (tmp_path / folder / "figures" / f"{name}.{figure}").stat().st_size > 0
    by_role = pd.read_csv(tmp_path / "p/patching.csv")
    assert set(by_role["role"]) <= set(prompt_pairs.ROLES) and (by_role["by"] == "role").all()
    assert (pd.read_csv(tmp_path / "q/patching.csv")["by"] == "position").all()
    capsys.readouterr()
    assert main(["evaluate", model, "--pool-size", "8", "--json", "--quiet"]) == 0
    printed = json.loads(capsys.readouterr().out)
    assert printed["provenance"]["command"] == f"compose-lens evaluate {model} --pool-size 8 --json --quiet"


def test_a_site_that_changes_nothing_scores_exactly_zero_not_float_noise():
    """A site whose patch moves the metric by float32 rounding only reads 0 [0, 0], not -3.2e-08."""
    from compose_lens.registry.patching.tables import normalised_with_ci

    g = torch.Generator().manual_seed(0)
    clean, corrupted = torch.rand(50, generator=g) + 2, torch.rand(50, generator=g)
    patched = torch.stack([corrupted - 3e-8 * torch.rand(50, generator=g), clean])  # noise, then the full effect
    value, low, high = normalised_with_ci(patched, clean, corrupted, n_boot=200)
    assert (value[0].item(), low[0].item(), high[0].item()) == (0.0, 0.0, 0.0)
    assert value[1].item() == pytest.approx(1.0)
