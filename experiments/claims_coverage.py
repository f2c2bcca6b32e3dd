"""Which numbers on the pages no claim checks: the coverage of docs/claims/.

    python experiments/check_claims.py --coverage    # per page: covered / settings / uncovered, each uncovered listed

Every number written on a page (README.md and docs/*.md) is one of:

* **covered**: inside the quote of a claim on that page (``docs/claims/<page>.toml``): recomputed from
  committed data by ``check_claims.py``;
* **a setting**: inside the quote of a setting (a ``[[setting]]`` in the page's file of ``docs/claims/``,
  ``everywhere.toml`` for every page: ``doc`` a page, or ``"*"``
  for every page; ``quote``; ``why``): a value chosen, not measured (``f = 0.7``, ``seed 42``,
  ``30,000 steps``), or a name that holds a number (``layer 2``, ``Python 3.11``);
* **code**: in inline code or a code block (commands, names, paths), except a block marked
  `` ```text ``, which is a program's output, measured, and counted like prose;
* **not a number**: part of a word (``fp32``, ``1-var``, ``blocks.0``, ``W_Q``), a link's address,
  a heading's or list's numbering;
* **uncovered**: anything else, a measured number nothing checks. ``tests/unit/test_claims.py``
  fails on one, naming it with its line.

A quote covers every place it appears on its page (whitespace, such as a wrapped line, does not
count). A setting's quote that is on none of its pages is an error too: it no longer marks anything.

**No debt.** Every page is at zero: the check fails on any uncovered number, so a number added or
changed on any page (a planted digit included) must be claimed, marked a setting, or removed.
"""

from __future__ import annotations

import re
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SETTINGS = ROOT / "docs" / "claims"  # the [[setting]] blocks beside each page's claims
NUMBER = re.compile(r"(?<![\w.])(?<![A-Za-z_]-)[-+−]?(?:\d{1,3}(?:,\d{3})+|\d+)(?:\.\d+)?(?:e[-+]?\d+)?%?"
                    r"(?![\w]|-[A-Za-z]|\.\d)")
OUTPUT_FENCE = "text"  # a ```text block is a program's output: its numbers are counted


def pages(root: Path = ROOT) -> list[str]:
    """The pages checked: the README and every page under docs/, as paths from the root."""
    return ["README.md"] + sorted(str(p.relative_to(root)) for p in (root / "docs").glob("*.md"))


def load_settings(path: Path = SETTINGS) -> list[dict]:
    """Every ``[[setting]]`` of a table, or of every table in a folder."""
    tables = sorted(path.glob("*.toml")) if path.is_dir() else [path] if path.is_file() else []
    return [s for table in tables for s in tomllib.loads(table.read_text()).get("setting", [])]


def _code_mask(text: str) -> list[bool]:
    """True for each character of ``text`` in code: fenced blocks (but ```text), indented blocks after
    a blank line, inline code spans; and in link addresses and heading / list numbering."""
    mask = [False] * len(text)

    def cover(start: int, end: int) -> None:
        mask[start:end] = [True] * (end - start)

    pos, fence, blank_before, in_indented = 0, None, True, False
    for line in text.splitlines(keepends=True):
        stripped = line.strip()
        if fence is not None:
            if stripped.startswith("```"):
                fence = None
                cover(pos, pos + len(line))
            elif fence != OUTPUT_FENCE:
                cover(pos, pos + len(line))
        elif stripped.startswith("```"):
            fence = stripped[3:].strip()
            cover(pos, pos + len(line))
        elif line.startswith("    ") and stripped and (blank_before or in_indented):
            in_indented = True
            cover(pos, pos + len(line))
        else:
            in_indented = in_indented and not stripped
            numbering = re.match(r"\s*(?:#+\s*)?\d+\.\s", line)  # "## 1. Which piece", "1. first"
            if numbering:
                cover(pos, pos + numbering.end())
        blank_before = not stripped
        pos += len(line)
    blocks_out = "".join(" " if m else ch for ch, m in zip(text, mask))
    for found in re.finditer(r"`[^`]+`", blocks_out):  # inline code (may wrap a line, not a paragraph)
        if "\n\n" not in found.group():
            cover(found.start(), found.end())
    for found in re.finditer(r"\]\([^)\s]*\)|<https?://[^>]*>|https?://\S+", text):  # link addresses
        cover(found.start(), found.end())
    return mask


def _flat(text: str) -> tuple[str, list[int]]:
    """``text`` with every run of whitespace one space, and each character's index in ``text``."""
    out, index, space = [], [], False
    for i, ch in enumerate(text):
        if ch.isspace():
            if not space:
                out.append(" ")
                index.append(i)
            space = True
        else:
            out.append(ch)
            index.append(i)
            space = False
    return "".join(out), index


def _spans(flat: str, index: list[int], quote: str) -> list[tuple[int, int]]:
    """Where a quote (whitespace flattened) appears, as spans of the original text."""
    needle = re.sub(r"\s+", " ", quote).strip()
    if not needle:
        return []
    return [(index[m.start()], index[m.start() + len(needle) - 1] + 1)
            for m in re.finditer(re.escape(needle), flat)]


class PageCoverage:
    """One page's numbers, sorted (a plain class: check_claims loads this file without importing it)."""

    def __init__(self, doc: str) -> None:
        self.doc, self.covered, self.settings, self.code = doc, 0, 0, 0
        self.uncovered: list[tuple[int, str, str]] = []  # (line, number, the line's text)

    @property
    def measured(self) -> int:
        return self.covered + len(self.uncovered)


def page_coverage(doc: str, text: str, claims: list[dict], settings: list[dict]) -> PageCoverage:
    """Sort every number of one page (``text``) into covered, setting, code or uncovered."""
    mask = _code_mask(text)
    flat, index = _flat(text)
    claimed = [span for c in claims if c.get("doc") == doc for span in _spans(flat, index, c.get("quote", ""))]
    chosen = [span for s in settings if s.get("doc") in (doc, "*") for span in _spans(flat, index, s.get("quote", ""))]
    found = PageCoverage(doc)
    line_starts = [0] + [m.end() for m in re.finditer("\n", text)]
    for number in NUMBER.finditer(text):
        start, end = number.span()
        if not re.search(r"\d", number.group()):
            continue
        if mask[start]:
            found.code += 1
        elif any(a <= start and end <= b for a, b in claimed):
            found.covered += 1
        elif any(a <= start and end <= b for a, b in chosen):
            found.settings += 1
        else:
            line = sum(1 for s in line_starts if s <= start)
            found.uncovered.append((line, number.group(), text.splitlines()[line - 1].strip()))
    return found


def coverage(claims: list[dict], settings: list[dict], root: Path = ROOT) -> list[PageCoverage]:
    return [page_coverage(doc, (root / doc).read_text(), claims, settings) for doc in pages(root)]


def stale_settings(settings: list[dict], root: Path = ROOT) -> list[str]:
    """Settings whose quote is on none of their pages (they mark nothing any more), and settings
    without a doc, quote or why."""
    problems, texts = [], {doc: re.sub(r"\s+", " ", (root / doc).read_text()) for doc in pages(root)}
    for s in settings:
        missing = [k for k in ("doc", "quote", "why") if not str(s.get(k, "")).strip()]
        if missing:
            problems.append(f"setting {s!r}: no {', '.join(missing)}; give doc (a page or \"*\"), quote and why")
            continue
        quote = re.sub(r"\s+", " ", s["quote"]).strip()
        where = texts.values() if s["doc"] == "*" else [texts.get(s["doc"], "")]
        if not any(quote in t for t in where):
            problems.append(f"{s['doc']}: the setting {s['quote']!r} is not on the page")
    return problems


def report(found: list[PageCoverage], claims: int) -> list[str]:
    """The coverage report's lines: one per page, then each uncovered number with its line."""
    lines = [f"{'page':32} {'measured':>8} {'covered':>8} {'settings':>8} {'code':>6} {'uncovered':>9}"]
    for page in found:
        lines.append(f"{page.doc:32} {page.measured:8} {page.covered:8} {page.settings:8} {page.code:6} "
                     f"{len(page.uncovered):9}")
    total = sum(len(p.uncovered) for p in found)
    lines.append(f"{claims} claims; {sum(p.covered for p in found)} numbers covered, "
                 f"{sum(p.settings for p in found)} settings, {total} uncovered")
    for page in found:
        for line, number, text in page.uncovered:
            lines.append(f"uncovered {page.doc}:{line}: {number}   | {text[:110]}")
    return lines
