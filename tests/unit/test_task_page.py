"""docs/task.md's example runs as printed, and the values its comments quote are what it computes."""

from __future__ import annotations

import re
from pathlib import Path

PAGE = Path(__file__).resolve().parents[2] / "docs" / "task.md"


def _example() -> tuple[str, dict]:
    code = re.search(r"```python\n(.*?)```", PAGE.read_text(), re.S).group(1)
    namespace: dict = {}
    exec(compile(code, str(PAGE), "exec"), namespace)
    return code, namespace


def test_the_task_page_example_runs_and_its_comments_say_what_it_computes():
    code, ns = _example()
    split, task, tokens = ns["split"], ns["task"], ns["tokens"]
    train, held = re.search(r"split: ([\d,]+) training pairs, ([\d,]+) held out", code).groups()
    assert (len(split.train_pairs), len(split.heldout_pairs)) == (int(train.replace(",", "")), int(held.replace(",", "")))
    quoted = re.search(r"# (\('b=7.*\))\n", code).group(1)
    decoded = ns["decode"](task, tokens)
    assert quoted == repr((ns["to_text"](task, tokens), decoded.label, decoded.type))
    assert f"# '{ns['to_token_string'](task, tokens)}'" in code
    assert f"# {[pool.name for pool in ns['pools_of'](task)][:3]}" in code
    assert f"# {ns['render'](split, ns['rows'][:5], __import__('torch').Generator().manual_seed(0)).tokens.shape}" in code
