"""experiments/divergence_scan.py: the longest diverged stretch a run came back from, on planted runs."""

import importlib.util
import json
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
spec = importlib.util.spec_from_file_location("divergence_scan", ROOT / "experiments" / "divergence_scan.py")
scan = importlib.util.module_from_spec(spec)
spec.loader.exec_module(scan)


def plant(run: Path, losses: list[float]) -> None:
    run.mkdir(parents=True)
    (run / "metrics.jsonl").write_text("".join(
        json.dumps({"step": 100 * (i + 1), "train_loss": loss}) + "\n" for i, loss in enumerate(losses)))


def test_the_scan_counts_a_spike_that_came_back_and_one_that_stayed(tmp_path, capsys):
    plant(tmp_path / "back", [1.4, 0.09, 1.5, 2.0, 0.05, 0.01])  # two diverged readings, then learned again
    plant(tmp_path / "stays", [1.4, 0.09, 1.5, 2.0, 30.0])
    plant(tmp_path / "never", [4.0, 3.9, 4.1, 3.95])  # never learned: never diverged
    n, frame = scan.scan([tmp_path])
    assert n == 3 and sorted(Path(r).name for r in frame["run"]) == ["back", "stays"]
    by = {Path(r["run"]).name: r for r in frame.to_dict("records")}
    assert by["back"]["came_back_after"] == 2 and not by["back"]["diverged_at_end"]
    assert by["stays"]["came_back_after"] == 0 and by["stays"]["first_diverged_at"] == 300
    scan.main([str(tmp_path)])
    assert "3 runs, 2 ever read diverged, 1 came back (after at most 2 readings in a row)" in capsys.readouterr().out
