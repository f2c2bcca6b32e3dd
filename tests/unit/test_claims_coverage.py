"""Every number on the pages is claimed, a setting, or code: `check_claims.py --coverage`.

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


@pytest.fixture(scope="module")
def found():
    return coverage.coverage(CLAIMS, SETTINGS)


def test_no_page_has_an_uncovered_number_or_a_stale_setting(found):
    uncovered = [(page.doc, line, number) for page in found for line, number, _ in page.uncovered]
    assert uncovered == [], f"uncovered numbers (claim them, mark them settings, or remove them): {uncovered[:10]}"
    assert coverage.stale_settings(SETTINGS) == []
    by_page = {page.doc: page for page in found}
    assert by_page["docs/stalls.md"].covered > 500 and by_page["docs/zoo.md"].covered > 500  # claims, not settings


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


def test_a_digit_planted_in_a_research_page_is_caught(tmp_path):
    root = _copy(tmp_path)  # a sentence of the speed page, a number in it changed
    _plant(root, "docs/speed.md", "\n\n", "\n\nThe step took 13 ms.\n\n")
    found = {page.doc: page for page in coverage.coverage(CLAIMS, SETTINGS, root)}
    assert [number for _, number, _ in found["docs/speed.md"].uncovered] == ["13"]


def test_a_number_added_to_the_readme_is_uncovered_and_a_changed_setting_is_stale(tmp_path):
    root = _copy(tmp_path)
    _plant(root, "README.md", "## Read on\n", "## Read on\n\nIt trains in 7 minutes.\n")
    _plant(root, "README.md", "answers 36", "answers 37")
    found = {page.doc: page for page in coverage.coverage(CLAIMS, SETTINGS, root)}
    assert sorted(number for _, number, _ in found["README.md"].uncovered) == ["37", "7"]
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


def test_the_command_reports_the_coverage_and_fails_on_an_uncovered_number(tmp_path, capsys, monkeypatch):
    assert check_claims.main(["--coverage"]) == 0
    out = capsys.readouterr().out
    assert "README.md" in out and "0 uncovered numbers, 0 stale settings" in out
    root = _copy(tmp_path)
    _plant(root, "README.md", "## Read on\n", "## Read on\n\nIt trains in 7 minutes.\n")
    measure = coverage.coverage
    monkeypatch.setattr(coverage, "coverage", lambda claims, settings: measure(claims, settings, root))
    monkeypatch.setattr(check_claims, "_script", lambda name: coverage)
    assert check_claims.main(["--coverage"]) == 1
    assert "uncovered README.md:" in capsys.readouterr().out
