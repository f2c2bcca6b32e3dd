"""``train --overwrite`` deletes only what compose-lens wrote: every entry it would delete, at any
depth, is checked by name and by kind against the run's layout (issue #45, data loss).

The run here is made by hand (no training): each of its files stands where train, report,
dynamics, TensorBoard and W&B put theirs.
"""

from __future__ import annotations

import os
import re

import pytest

from compose_lens import registry

from compose_lens.training import runs
from compose_lens.core.config import RunConfig
from compose_lens.core.errors import ComposeLensError
from compose_lens.data.safety import MARKER


def _everything_compose_lens_writes(run):
    run.mkdir()
    (run / "config.json").write_text(RunConfig().to_json())
    for name in ("split.json", "metrics.jsonl", "results.json", "resume.safetensors", "model.safetensors",
                 "report.html", "report_problems.txt", MARKER):
        (run / name).write_text("x")
    for step in ("step_000010", "step_000020"):
        (run / "checkpoints" / step).mkdir(parents=True)
        (run / "checkpoints" / step / "model.safetensors").write_text("w")
        (run / "checkpoints" / step / "config.json").write_text("{}")
    (run / "checkpoints" / ".step_000030.0123456789abcdef.tmp").mkdir()  # a killed trainer's staged checkpoint
    (run / "figures").mkdir()
    for name in ("attention_3.png", "attention_3.csv", "progress_measures.png", "ablation.csv"):
        (run / "figures" / name).write_text("f")
    (run / "results" / "patching" / "figures").mkdir(parents=True)
    for name in ("dynamics.csv", "phases.json", "dynamics.png", MARKER, ".dynamics.csv.0123456789abcdef.tmp"):
        (run / "results" / name).write_text("r")
    for name in ("patching.csv", "patching.provenance.json"):
        (run / "results" / "patching" / name).write_text("r")
    (run / "results" / "patching" / "figures" / "patching.png").write_text("r")
    (run / "tensorboard").mkdir()
    (run / "tensorboard" / "events.out.tfevents.1764936000.host.123.0").write_text("t")
    wandb_run = run / "wandb" / "offline-run-20261205_120215-90x14kq8"
    for sub in ("files", "logs", "tmp"):
        (wandb_run / sub).mkdir(parents=True)
    (wandb_run / "logs" / "debug.log").write_text("l")
    (run / "wandb" / "latest-run").symlink_to(wandb_run.name)
    (run / "wandb" / "debug.log").symlink_to(f"{wandb_run.name}/logs/debug.log")


def _tree(root):
    return sorted((str(p.relative_to(root)), p.is_symlink(), p.is_dir()) for p in root.rglob("*"))


def test_a_run_of_compose_lens_files_only_is_replaced(tmp_path):
    run = tmp_path / "run"
    _everything_compose_lens_writes(run)
    assert runs.foreign_in_run(run) is None
    assert runs.plan_directory(run, RunConfig(), resume=False, overwrite=True) == "replace"


FOREIGN = {
    "results/my_notes.txt": lambda run: (run / "results" / "my_notes.txt").write_text("mine"),
    "tensorboard/my_run": lambda run: (run / "tensorboard" / "my_run").mkdir(),
    "checkpoints/step_000010/notes.md": lambda run: (run / "checkpoints" / "step_000010" / "notes.md").write_text("m"),
    "checkpoints/best": lambda run: (run / "checkpoints" / "best").mkdir(),
    "figures/my_plot.png": lambda run: (run / "figures" / "my_plot.png").write_text("mine"),
    "results/patching/figures/mine.png": lambda run: (run / "results" / "patching" / "figures" / "mine.png")
    .write_text("m"),
    "results/old": lambda run: (run / "results" / "old").mkdir(),
    "wandb/notes.txt": lambda run: (run / "wandb" / "notes.txt").write_text("mine"),
    # the kind, not only the name
    "figures/circuit.png (a folder": lambda run: (run / "figures" / "circuit.png").mkdir(),
    "metrics.jsonl (a symlink": lambda run: ((run / "metrics.jsonl").unlink(),
                                             (run / "metrics.jsonl").symlink_to(run.parent / "precious")),
    "results/dynamics.csv (a symlink": lambda run: ((run / "results" / "dynamics.csv").unlink(),
                                                    (run / "results" / "dynamics.csv").symlink_to(run.parent / "p")),
    "results/.dynamics.csv.0123456789abcdef.tmp (a symlink": lambda run: (
        (run / "results" / ".dynamics.csv.0123456789abcdef.tmp").unlink(),
        (run / "results" / ".dynamics.csv.0123456789abcdef.tmp").symlink_to(run.parent / "precious")),
    "results/phases.json (a special file": lambda run: ((run / "results" / "phases.json").unlink(),
                                                         os.mkfifo(run / "results" / "phases.json")),
}


@pytest.mark.parametrize("said", list(FOREIGN))
def test_a_user_entry_anywhere_in_a_run_is_refused_and_nothing_is_touched(said, tmp_path):
    run = tmp_path / "run"
    _everything_compose_lens_writes(run)
    (tmp_path / "precious").write_text("the user's file\n")
    FOREIGN[said](run)
    before = _tree(tmp_path)
    with pytest.raises(ComposeLensError, match="--overwrite will not delete it") as refused:
        runs.plan_directory(run, RunConfig(), resume=False, overwrite=True)
    assert f"holds {said}" in str(refused.value), str(refused.value)
    assert _tree(tmp_path) == before


def test_a_user_file_named_like_a_run_folder_is_refused(tmp_path):
    """``RUN/wandb`` as the user's file (compose-lens writes a folder there): issue #45."""
    run = tmp_path / "run"
    _everything_compose_lens_writes(run)
    import shutil

    shutil.rmtree(run / "wandb")
    (run / "wandb").write_text("my notes on W&B\n")
    with pytest.raises(ComposeLensError, match=r"holds wandb \(a file, where compose-lens writes a folder\)"):
        runs.plan_directory(run, RunConfig(), resume=False, overwrite=True)
    assert (run / "wandb").read_text() == "my notes on W&B\n"


def test_the_layout_names_every_table_document_and_figure_the_registered_analyses_write():
    """The run layout is the registry's declarations' own (compose_lens.core.outputs, filled as the registry finds
    them: runs may not import the registry, layers), not a copy kept by hand."""
    results = runs.run_layout()["results"]
    for analysis in registry.ANALYSES:
        if analysis.of == "run":
            assert re.escape(analysis.name) not in results
            continue
        files = results[re.escape(analysis.name)]
        table, figures = next(p for p in files if p != "figures"), files["figures"]
        for stem in analysis.tables + analysis.documents:
            assert re.fullmatch(table, f"{stem}.csv") and re.fullmatch(table, f"{stem}.json")
        for stem in analysis.figures:
            name = stem.replace(r"\d+", "0")
            assert any(re.fullmatch(pattern, f"{name}.png") for pattern in figures), (analysis.name, stem)
            assert any(re.fullmatch(pattern, f"{name}.png") for pattern in runs.run_layout()["figures"])
