"""The README as a newcomer reads it, often off a package index page where relative links break:
short, every link absolute and pointing at a file that exists, the Python it needs, and every
command the command line has is in the user's guide."""

from __future__ import annotations

import re
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
README = ROOT / "README.md"
MAX_BYTES = 12_000
PROJECT = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
BASE = PROJECT["urls"]["Repository"] + "/blob/main/"
LINK = re.compile(r"\]\(([^)\s]+)\)")


def _anchors(page: Path) -> set[str]:
    """The anchors of a markdown page's headings, as GitHub and mkdocs write them."""
    return {re.sub(r"[^\w\- ]", "", h.strip().lower()).replace(" ", "-")
            for h in re.findall(r"(?m)^#+\s+(.*)$", page.read_text())}


def test_the_readme_is_short():
    assert README.stat().st_size <= MAX_BYTES, f"README.md is {README.stat().st_size} bytes; at most {MAX_BYTES}"


def test_every_readme_link_is_absolute_and_its_target_exists():
    links = LINK.findall(README.read_text())
    assert len(links) > 10
    for link in links:
        assert link.startswith(("https://", "http://")), f"{link}: a relative link breaks off the repository"
        if not link.startswith(BASE):  # another site (the study's paper); into this repository only through BASE
            assert not link.startswith(PROJECT["urls"]["Repository"] + "/"), f"{link}: not under {BASE}"
            continue
        path, _, anchor = link[len(BASE):].partition("#")
        target = ROOT / path
        assert target.is_file(), f"{link}: {path} is not in the repository"
        if anchor:
            assert anchor in _anchors(target), f"{link}: no heading #{anchor} in {path}"


def test_the_readme_states_the_python_it_needs():
    needs = PROJECT["requires-python"].removeprefix(">=")
    assert f"Python {needs} or later" in README.read_text()


def test_every_command_has_its_how_to_in_the_users_guide():
    from compose_lens.cli import build_parser

    from tests.unit.test_api_page import docs_hook

    commands = build_parser()._subparsers._group_actions[0].choices
    hook = docs_hook()  # the page as built: each analysis's command written in from its declaration
    guide = hook.written("commands.md", (ROOT / "docs" / "commands.md").read_text())
    missing = [name for name in commands if f"compose-lens {name} " not in guide]
    assert missing == [], f"docs/commands.md has no example of: {missing}"
