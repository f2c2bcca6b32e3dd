"""Every shell line of docs/own-model.md runs, on a model of the page's own declaration.

The page's example declaration (its JSON block) is read as a researcher would save it; a TransformerLens
model of it (random weights: the lines are about what runs, not what a trained model finds) is saved as
``runs/own-model``, with a prompt file ``prompts.jsonl`` of the declared task; then each line of the page's
``bash`` blocks runs from that folder. A line that is not a ``compose-lens`` command fails the test, so the
page cannot gain a shell line no test runs (own-model.md's ``same-mlp runs/own-model`` lacked ``--out``).
"""

from __future__ import annotations

import json
import re
import shlex
from pathlib import Path

from compose_lens.cli import main
from compose_lens.data.declaration import TaskDeclaration
from tests import user_models

PAGE = Path(__file__).resolve().parents[2] / "docs" / "own-model.md"


def blocks(kind: str) -> list[str]:
    return re.findall(rf"```{kind}\n(.*?)```", PAGE.read_text(), flags=re.S)


def test_every_shell_line_of_the_page_runs(tmp_path, monkeypatch):
    from compose_lens.data.sampler import concat_batches, make_pools
    from compose_lens.data.task import to_text

    declaration = TaskDeclaration.from_dict(json.loads(blocks("json")[0]), "docs/own-model.md")
    model = user_models.tl_model(declaration, n_heads=2)
    folder = user_models.save(model, declaration, tmp_path / "runs" / "own-model")
    batch = concat_batches(make_pools(declaration.split(), 4))[0]
    lines = [json.dumps({"sequence": to_text(declaration.task, t.tolist()), "answer": int(label)})
             for t, label in zip(batch.tokens, batch.labels)]
    (tmp_path / "prompts.jsonl").write_text("\n".join(lines) + "\n")
    monkeypatch.chdir(tmp_path)
    commands = [line.strip() for block in blocks("bash") for line in block.splitlines() if line.strip()]
    assert len(commands) >= 9 and folder.is_dir()
    for command in commands:
        words = shlex.split(command.split("  #")[0])
        assert words[0] == "compose-lens", f"{command!r}: not a compose-lens command; run it in this test"
        assert main([*words[1:], *([] if "--quiet" in words or words[1] in ("evaluate", "export", "attention")
                                   else ["--quiet"])]) == 0, command
