"""The experiment scripts are held to the command line's standard (issue #45): bad input is one
line on stderr and exit status 2, no traceback, nothing trained or written; and a run already
there is never tabled under settings it was not trained with.

Each script's ``main`` runs in this process (as the scripts' own tests do); no case trains.
"""

from __future__ import annotations

import hashlib
import importlib.util
import json
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


def script(name: str, root: Path = ROOT):
    spec = importlib.util.spec_from_file_location(name, root / "experiments" / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def tree(root: Path) -> str:
    h = hashlib.sha256()
    for path in sorted(root.rglob("*")):
        h.update(str(path.relative_to(root)).encode())
        h.update(path.read_bytes() if path.is_file() else b"<dir>")
    return h.hexdigest()


def _stall_run(sb: Path, steps: int = 100, stop_at: str = "generalised") -> None:
    run = sb / "out" / "runs" / "seed=1_kernel=native_threads=1_fp32"
    run.mkdir(parents=True)
    (run / "config.json").write_text(json.dumps({"train": {"steps": steps, "stop_at": stop_at}, "task": {}}))


def _point(sb: Path, text: str) -> None:
    (sb / "work" / "L2_d64_h1_mlplast_s0").mkdir(parents=True)
    (sb / "work" / "L2_d64_h1_mlplast_s0" / "point.json").write_text(text)


def _grid_csv(sb: Path, text: str) -> None:
    (sb / "out").mkdir()
    (sb / "out" / "grid.csv").write_text(text)


def _claims(text: str | bytes):
    """A claims table in the sandbox, ``claims.toml``."""
    def setup(sb: Path) -> None:
        (sb / "claims.toml").write_bytes(text if isinstance(text, bytes) else text.encode())
    return setup


# one claim of a claims table (its page the repository's README), less what ``drop`` names, with ``change``
def _claim(drop: tuple[str, ...] = (), **change) -> str:
    fields = {"doc": '"README.md"', "quote": '"20 of 60"', "source": '"README.md"', "compute": '"wilson"',
              "template": '"{k} of {n}"', "args": "{ k = 20, n = 60 }", **change}
    return "[[claim]]\n" + "".join(f"{k} = {v}\n" for k, v in fields.items() if k not in drop)


CLAIMS = ["--claims", "{sb}/claims.toml"]
STALL = ["--seeds", "1", "--kernels", "native", "--threads", "1"]
# (id, script, argv with {sb}, setup, what the line must say)
CASES = [
    ("stall-rate-other-steps", "stall_rate", ["--out", "{sb}/out", *STALL, "--steps", "200"], _stall_run,
     "was trained with --steps 100, not 200"),
    ("stall-rate-other-stop-at", "stall_rate", ["--out", "{sb}/out", *STALL, "--steps", "100", "--stop-at", "decided"],
     _stall_run, "was trained with --stop-at generalised, not decided"),
    ("stall-rate-damaged-config", "stall_rate", ["--out", "{sb}/out", *STALL, "--steps", "100"],
     lambda sb: (_stall_run(sb), (sb / "out" / "runs" / "seed=1_kernel=native_threads=1_fp32" / "config.json")
                 .write_text("{")), "not a compose-lens run's config"),
    ("stall-rate-seed-words", "stall_rate", ["--out", "{sb}/out", "--seeds", "abc"], None, "--seeds abc"),
    ("stall-rate-seed-range-words", "stall_rate", ["--out", "{sb}/out", "--seeds", "1-x"], None, "whole numbers"),
    ("stall-rate-empty-seed-range", "stall_rate", ["--out", "{sb}/out", "--seeds", "111-100"], None, "no seed in it"),
    ("stall-rate-workers-0", "stall_rate", ["--out", "{sb}/out", *STALL, "--workers", "0"], None, "--workers 0"),
    ("stall-rate-stack-words", "stall_rate", ["--out", "{sb}/out", *STALL, "--stack", "many"], None, "--stack many"),
    ("stall-rate-stack-0", "stall_rate", ["--out", "{sb}/out", *STALL, "--stack", "0"], None, "--stack 0"),
    ("stall-rate-stack-on-gpu", "stall_rate", ["--out", "{sb}/out", *STALL, "--stack", "4", "--device", "cuda"], None,
     "stacked runs train on the CPU"),
    ("stall-rate-out-is-file", "stall_rate", ["--out", "{sb}/afile", *STALL], None, "is a file, not a folder"),
    ("modularity-zero-heads", "modularity_grid", ["point", "--n-heads", "0", "--work", "{sb}/work"], None,
     "--n-heads 0: must be at least 1"),
    ("modularity-zero-d-model", "modularity_grid", ["point", "--d-model", "0", "--work", "{sb}/work"], None,
     "--d-model 0"),
    ("modularity-heads-not-dividing", "modularity_grid", ["point", "--n-heads", "3", "--work", "{sb}/work"], None,
     "not a multiple"),
    ("modularity-damaged-point", "modularity_grid", ["table", "--work", "{sb}/work", "--out", "{sb}/out"],
     lambda sb: _point(sb, "{"), "point.json: not valid JSON"),
    ("modularity-point-not-a-row", "modularity_grid", ["table", "--work", "{sb}/work", "--out", "{sb}/out"],
     lambda sb: _point(sb, "[1, 2]"), "not a point's row"),
    ("modularity-grid-missing-columns", "modularity_grid", ["grid", "--only", "heads", "--work", "{sb}/work",
                                                            "--out", "{sb}/out"],
     lambda sb: _grid_csv(sb, "a,b\n1,2\n"), "no column 'n_layers'"),
    ("modularity-work-is-file", "modularity_grid", ["table", "--work", "{sb}/afile"], None, "is a file, not a folder"),
    ("modularity-out-is-file", "modularity_grid", ["table", "--work", "{sb}/work", "--out", "{sb}/afile"], None,
     "is a file, not a folder"),
    ("divergence-folder-is-file", "divergence_scan", ["{sb}/afile"], None, "is a file, not a folder"),
    ("divergence-csv-is-folder", "divergence_scan", ["{sb}", "--csv", "{sb}"], None, "is a folder"),
    ("divergence-nothing-to-scan", "divergence_scan", ["{sb}/nothing"], None, "no folder to scan"),
    # issue #45, unclear: the reason that holds, not another
    ("modularity-grid-spaced-column", "modularity_grid", ["grid", "--only", "heads", "--work", "{sb}/work",
                                                          "--out", "{sb}/out"],
     lambda sb: _grid_csv(sb, "n_layers, d_model\n1,2\n"), "the column ' d_model' has a space around its name"),
    ("check-claims-folder", "check_claims", ["--claims", "{sb}"], None, "holds no [[claim]] table"),
    # issue #59: a damaged claims table was a traceback; a claim that checks nothing passed
    ("check-claims-invalid-toml", "check_claims", CLAIMS, _claims("[[claim]\n"), "not valid TOML"),
    ("check-claims-binary", "check_claims", CLAIMS, _claims(b"\xff\xfe\x00\x01"), "not a UTF-8 text file"),
    ("check-claims-empty", "check_claims", CLAIMS, _claims(""), "holds no [[claim]] table"),
    ("check-claims-no-claim", "check_claims", CLAIMS, _claims("[note]\ntext = 'hello'\n"), "holds no [[claim]]"),
    ("check-claims-no-quote", "check_claims", CLAIMS, _claims(_claim(("quote",))), "claim 1 (README.md) has no quote"),
    ("check-claims-no-compute", "check_claims", CLAIMS, _claims(_claim(("compute",))), "has no compute"),
    ("check-claims-missing-page", "check_claims", CLAIMS, _claims(_claim(doc='"nowhere.md"')),
     "quotes the page nowhere.md: no such file"),
    ("check-claims-page-a-folder", "check_claims", CLAIMS, _claims(_claim(doc='"docs"')),
     "quotes the page docs: is a folder, not a file"),
    ("check-claims-quote-an-int", "check_claims", CLAIMS, _claims(_claim(quote="20")), "has a quote that is an int"),
    ("check-claims-claim-not-a-table", "check_claims", CLAIMS, _claims("claim = [5]\n"), "is an int, not a table"),
    ("check-claims-unknown-key", "check_claims", CLAIMS, _claims(_claim(qoute='"x"')), "unknown key(s) qoute"),
    ("check-claims-empty-quote-and-template", "check_claims", CLAIMS, _claims(_claim(quote='""', template='""')),
     "has an empty quote, so it checks nothing"),
    ("check-claims-template-without-a-field", "check_claims", CLAIMS, _claims(_claim(template='"20 of 60"')),
     "takes no field from the data, so it checks nothing"),
    ("mirror-pairs-model-is-file", "mirror_pairs", ["--model", "{sb}/afile"], None, "is a file, not a folder"),
]


# issue #59's classes of the check_claims cases (tests/integration/test_bad_input.py --round-five counts them)
CLAIMS_CLASSES = {name: ("silent wrong" if name in ("check-claims-unknown-key", "check-claims-empty-quote-and-template",
                                                    "check-claims-template-without-a-field") else "traceback")
                  for name, which, *_ in CASES if which == "check_claims" and name != "check-claims-folder"}


def run_script_case(name: str, sb: Path, root: Path = ROOT) -> tuple[int | str, str]:
    """(exit status, stderr) of one case run in ``sb`` (made empty here) by the script of the checkout
    ``root``, or ("traceback", the exception)."""
    import contextlib
    import io

    _, which, argv, setup, _ = next(c for c in CASES if c[0] == name)
    sb.mkdir()
    (sb / "afile").write_text("a file\n")
    if setup:
        setup(sb)
    err = io.StringIO()
    try:
        with contextlib.redirect_stderr(err), contextlib.redirect_stdout(io.StringIO()):
            status = script(which, root).main([a.replace("{sb}", str(sb)) for a in argv])
    except SystemExit as exit_:
        status = exit_.code
    except Exception as exc:  # noqa: BLE001 (what the fuzzer looks for)
        return "traceback", f"{type(exc).__name__}: {exc}"
    return status, err.getvalue()


@pytest.mark.parametrize("name,which,argv,setup,says", CASES, ids=[c[0] for c in CASES])
def test_bad_input_to_an_experiment_script_is_one_line_and_exit_2(name, which, argv, setup, says, tmp_path, capsys):
    sb = tmp_path / "sb"
    sb.mkdir()
    (sb / "afile").write_text("a file\n")
    if setup:
        setup(sb)
    before = tree(sb)
    capsys.readouterr()
    try:
        status = script(which).main([a.replace("{sb}", str(sb)) for a in argv])
    except SystemExit as exit_:
        status = exit_.code
    err = capsys.readouterr().err
    assert status == 2, err
    assert err.count("\n") == 1 and "Traceback" not in err and says in err, err
    assert tree(sb) == before


def test_divergence_scan_reads_past_a_loss_that_is_not_a_number(tmp_path, capsys):
    """A metrics.jsonl line with a loss of the wrong type (or a folder named metrics.jsonl) is not a
    reading: the scan goes on."""
    run = tmp_path / "runs" / "r"
    run.mkdir(parents=True)
    lines = [{"step": 10 * i, "train_loss": 1.0 / (i + 1)} for i in range(5)] + [{"step": 60, "train_loss": "nan?"}]
    (run / "metrics.jsonl").write_text("".join(json.dumps(line) + "\n" for line in lines))
    (tmp_path / "runs" / "odd" / "metrics.jsonl").mkdir(parents=True)
    script("divergence_scan").main([str(tmp_path / "runs")])
    assert "1 runs, 0 ever read diverged" in capsys.readouterr().out


@pytest.mark.parametrize("option", ["--seeds", "--sweeps", "--replicates"])
def test_threshold_interval_coverage_refuses_nothing_to_simulate(option):
    """--seeds 0 (no rows: KeyError) and --sweeps 0 (a division by zero) were tracebacks (issue #45)."""
    import subprocess
    import sys

    done = subprocess.run([sys.executable, str(ROOT / "experiments" / "threshold_interval_coverage.py"), option, "0"],
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 2 and done.stderr == f"error: {option} 0: give at least 1\n", done.stderr


def test_every_damaged_claim_is_one_line(tmp_path, capsys):
    """Two damaged claims beside a sound one: one line each, naming the claim, and nothing checked (issue #59)."""
    (tmp_path / "claims.toml").write_text(_claim() + _claim(("quote",)) + _claim(compute='"guess"'))
    assert script("check_claims").main(["--claims", str(tmp_path / "claims.toml")]) == 2
    out, err = capsys.readouterr()
    assert out == "" and err.count("\n") == 2 and "Traceback" not in err, err
    assert "claim 2 (README.md) has no quote" in err and "claim 3 (README.md) has the unknown computation 'guess'" in err
