"""A model trained outside compose-lens, on data compose-lens never rendered, analysed on its own prompt file.

The researcher's data here come from a generator of the test's own (not compose-lens's renderer): exactly two
assignments first, the padding after them (before the query), an infix subtraction ``x - y =``, in the
researcher's own shuffled token ids. The model is trained on it with plain torch and TransformerLens. Its task
declares that context distribution (``fewest_assignments`` 2, ``padding`` right) and three held-out pairs.
``--prompts FILE`` then makes the file's sequences the pools: ``evaluate`` reports the file's accuracy (equal to
the plain model's own on the file's ids, so the file is read in the researcher's coordinates) beside the
declared distribution's, and ``same-mlp`` and ``patch`` run on it.
"""

from __future__ import annotations

import json
import random

import torch

from compose_lens.cli import main
from tests import user_models

HELDOUT = ((0, 1), (2, 3), (4, 5))


def researchers_data(decl, n: int, seed: int, heldout_ok: bool) -> list[tuple[list[int], int]]:
    """(tokens in the researcher's ids and positions, answer) of ``n`` sequences: two assignments, then PAD,
    then ``x - y =`` (each operand a number or one of the two variables)."""
    rng, p = random.Random(seed), decl.modulus
    out = []
    while len(out) < n:
        names = rng.sample(range(len(decl.variables)), 2)
        values = [rng.randrange(p) for _ in names]
        x, y = rng.randrange(p), rng.randrange(p)
        kind = rng.randrange(3)
        left = names[0] if kind >= 1 else None
        right = names[1] if kind == 2 else None
        x = values[0] if left is not None else x
        y = values[1] if right is not None else y
        if not heldout_ok and (x, y) in HELDOUT:
            continue
        context = [t for name, value in zip(names, values) for t in (decl.variables[name], decl.numbers[value])]
        context += [decl.pad] * (decl.seq_len - 4 - len(context))
        lhs = decl.variables[left] if left is not None else decl.numbers[x]
        rhs = decl.variables[right] if right is not None else decl.numbers[y]
        out.append((context + [lhs, decl.operator, rhs, decl.equals], (x - y) % p))
    return out


def test_a_model_trained_elsewhere_on_its_own_prompt_file(tmp_path, capsys):
    decl = user_models.declaration(query="infix", output="vocab", unused=1, operation="subtract",
                                   heldout_pairs=HELDOUT, left_forbidden=(), right_forbidden=(),
                                   max_assignments=2, fewest_assignments=2, padding="right")
    model = user_models.tl_model(decl, n_heads=1)
    data = researchers_data(decl, 128 * 400, seed=0, heldout_ok=False)
    optimiser = torch.optim.AdamW(model.parameters(), lr=3e-3, weight_decay=0.01)
    model.train()
    for step in range(400):  # plain torch: the researcher's own training loop
        batch = data[128 * step: 128 * (step + 1)]
        tokens = torch.tensor([t for t, _ in batch])
        answers = torch.tensor([decl.numbers[a] for _, a in batch])  # output vocab: the answer's id
        loss = torch.nn.functional.cross_entropy(model(tokens)[:, -1], answers)
        optimiser.zero_grad()
        loss.backward()
        optimiser.step()
    model.eval()
    folder = user_models.save(model, decl, tmp_path / "mine")

    prompts = researchers_data(decl, 300, seed=1, heldout_ok=True)
    lines = [json.dumps({"sequence": tokens, "answer": answer}) for tokens, answer in prompts]
    (tmp_path / "prompts.jsonl").write_text("\n".join(lines) + "\n")
    with torch.no_grad():
        logits = model(torch.tensor([t for t, _ in prompts]))[:, -1][:, list(decl.numbers)]
    plain = (logits.argmax(-1) == torch.tensor([a for _, a in prompts])).float().mean().item()

    assert main(["evaluate", str(folder), "--prompts", str(tmp_path / "prompts.jsonl"), "--pool-size", "200",
                 "--json"]) == 0
    said = json.loads(capsys.readouterr().out)
    assert abs(said["prompts"]["all"]["accuracy"] - plain) < 0.01 and said["prompts"]["all"]["n"] == 300
    assert plain > 0.2  # it learned something (chance 1/7)
    assert set(said["pools"]) == {"0var_train", "0var_add_restricted", "1var_train", "1var_add_restricted",
                                  "2var_train", "2var_add_restricted"}  # no slot is forbidden: no such pools
    assert sum(r["n"] for r in said["pool_intervals"].values()) == 300
    assert "training distribution" in said["declared"]["pools"] and "2var_train" in said["declared"]["pools"]
    assert main(["evaluate", str(folder), "--prompts", str(tmp_path / "prompts.jsonl")]) == 0
    table = capsys.readouterr().out
    assert "your prompts" in table and "declared distribution" in table

    assert main(["same-mlp", str(folder), "--prompts", str(tmp_path / "prompts.jsonl"), "--n", "40",
                 "--out", str(tmp_path / "sm"), "--quiet"]) == 0
    assert "rendered from the declared distribution, not from" in capsys.readouterr().out
    assert main(["patch", str(folder), "--prompts", str(tmp_path / "prompts.jsonl"), "--n-pairs", "60",
                 "--out", str(tmp_path / "patch"), "--quiet"]) == 0
    import pandas as pd

    patched = pd.read_csv(tmp_path / "patch" / "patching.csv")
    ones = [t for t, _ in prompts if (decl.variables[0] in t[-4:-1] or any(v in t[-4:-1] for v in decl.variables))
            and sum(v in t[-4:-1] for v in decl.variables) == 1]
    assert 2 <= patched["n_pairs"].iloc[0] <= min(60, len(ones))  # the file's 1-var sequences, corrupted
