"""Every number on the pages is claimed, a setting, code, or recorded debt: `check_claims.py --coverage`.

The audit of issue 55 found digits planted in text no claim covers passing every check. These tests
run the coverage check on the repository's pages, and plant digits in copies of them."""

from __future__ import annotations

import importlib.util
import shutil
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


def _load(name: str):
    spec = importlib.util.spec_from_file_location(name, ROOT / "experiments" / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


coverage = _load("claims_coverage")
check_claims = _load("check_claims")
CLAIMS, SETTINGS = check_claims.load(), coverage.load_settings()
# pages brought to no uncovered number at all: nothing of theirs may be recorded as debt
AT_ZERO = ("README.md", "docs/stalls.md", "docs/install.md", "docs/commands.md", "docs/python.md", "docs/index.md",
           "docs/transformerlens.md", "docs/extending.md", "docs/api.md")


@pytest.fixture(scope="module")
def found():
    return coverage.coverage(CLAIMS, SETTINGS)


def test_every_uncovered_number_is_recorded_and_every_recorded_one_is_still_there(found):
    new, gone = coverage.against_recorded(found, coverage.load_recorded())
    assert new == [], f"uncovered numbers, not recorded (claim them or mark them settings): {new[:10]}"
    assert gone == [], f"recorded but no longer uncovered (python experiments/check_claims.py --coverage --record): {gone[:10]}"
    assert coverage.stale_settings(SETTINGS) == []


def test_the_readme_the_stall_page_and_the_guide_have_no_uncovered_number(found):
    by_page = {page.doc: page for page in found}
    for doc in AT_ZERO:
        assert by_page[doc].uncovered == [], f"{doc}: {by_page[doc].uncovered[:5]}"
    assert not [entry for entry in coverage.load_recorded() if entry.split("\t")[0] in AT_ZERO]
    assert by_page["docs/stalls.md"].covered > 500  # the stall page is claims, not settings


def _copy(tmp_path: Path) -> Path:
    root = tmp_path / "repo"
    (root / "docs").mkdir(parents=True)
    shutil.copy(ROOT / "README.md", root / "README.md")
    for page in (ROOT / "docs").glob("*.md"):
        shutil.copy(page, root / "docs" / page.name)
    return root


def _plant(root: Path, doc: str, old: str, new: str) -> None:
    text = (root / doc).read_text()
    assert old in text
    (root / doc).write_text(text.replace(old, new, 1))


def test_a_digit_planted_in_recorded_lab_notebook_text_is_caught(tmp_path):
    root = _copy(tmp_path)
    entry = next(e for e in coverage.load_recorded() if e.startswith("docs/speed.md\t"))
    doc, number, line = entry.split("\t")
    changed = number[:-1] + ("1" if number[-1] != "1" else "2")
    raw = next(raw for raw in (root / doc).read_text().splitlines() if " ".join(raw.split()) == line)
    _plant(root, doc, raw, raw.replace(number, changed, 1))
    new, gone = coverage.against_recorded(coverage.coverage(CLAIMS, SETTINGS, root), coverage.load_recorded())
    assert any(e.startswith(f"{doc}\t{changed}\t") for e in new) and entry in gone


def test_a_number_added_to_the_readme_is_new_and_a_changed_setting_is_stale(tmp_path):
    root = _copy(tmp_path)
    _plant(root, "README.md", "## Read on\n", "## Read on\n\nIt trains in 7 minutes.\n")
    _plant(root, "README.md", "answers 36", "answers 37")
    found = coverage.coverage(CLAIMS, SETTINGS, root)
    new, _ = coverage.against_recorded(found, coverage.load_recorded())
    assert sorted(e.split("\t")[1] for e in new) == ["37", "7"] and all(e.startswith("README.md\t") for e in new)
    assert coverage.stale_settings(SETTINGS, root) == ["README.md: the setting 'answers 36' is not on the page"]


def test_numbers_are_sorted_into_claims_settings_code_and_uncovered(tmp_path):
    page = ("# 1. A page\n\nThe rate is 20 of 60 at f = 0.7; a run took 945 s.\n\n"
            "```bash\ncompose-lens train --set steps=3000\n```\n\n```text\nprinted 0.9943\n```\n\n"
            "See [the table](docs/x.md#2-b), `--seeds 100-111`, fp32, 1-var, blocks.0 and 2,000-4,800 steps.\n")
    claims = [{"doc": "docs/p.md", "quote": "20 of 60"}]
    settings = [{"doc": "*", "quote": "f = 0.7", "why": "w"}]
    found = coverage.page_coverage("docs/p.md", page, claims, settings)
    assert (found.covered, found.settings) == (2, 1)
    assert [number for _, number, _ in found.uncovered] == ["945", "0.9943", "2,000", "4,800"]
    assert found.code == 4  # the heading's 1., steps=3000 in the block, 100 and 111 inline; fp32, 1-var, blocks.0 are words


def test_the_command_reports_the_coverage_and_fails_on_a_new_number(tmp_path, capsys, monkeypatch):
    assert check_claims.main(["--coverage"]) == 0
    out = capsys.readouterr().out
    assert "README.md" in out and "0 uncovered numbers not recorded" in out
    monkeypatch.setattr(coverage, "RECORDED", tmp_path / "empty.txt")  # nothing recorded: every debt is new
    monkeypatch.setattr(check_claims, "_script", lambda name: coverage)
    assert check_claims.main(["--coverage"]) == 1
    assert "NEW uncovered" in capsys.readouterr().out
