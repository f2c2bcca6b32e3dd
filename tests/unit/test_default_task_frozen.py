"""The study's task is frozen: its sequences, pools and split are bit-identical to before the variants.

The task variants (reassignment, noise tokens, chains; docs/variants.md) are settings of
the task section that default to the study's task. Adding them must not move one token
of the default task: every result of the project was produced with these sequences.

The expected sha256 digests below were computed on main's code *before* the variants
were written (commit 006fbef), with fixed seeds. A change to the default generator, the
split, the pools, the readable form or the default config's JSON changes a digest and
fails here. If a change to the default task is ever intended, it changes every number
of the study: recompute the digests with :func:`digests` and say so in the commit.
"""

from __future__ import annotations

import hashlib
import json

import pytest
import torch

from compose_lens.core.config import RunConfig, TaskConfig
from compose_lens.data.sampler import TrainingSampler, make_exhaustive, make_pools, render
from compose_lens.data.split import Split, training_rows
from compose_lens.data.streams import derived_generator
from compose_lens.data.task import parse_sequence, to_text, to_token_string

NINE_POOLS = ("0var_train", "0var_add_restricted", "1var_train", "1var_add_restricted", "1var_var_restricted",
              "2var_train", "2var_add_restricted", "2var_var_restricted_1", "2var_var_restricted_2")


def sha(*tensors: torch.Tensor) -> str:
    """sha256 over the int64 bytes of the tensors, with their shapes (so a reshape is a change)."""
    h = hashlib.sha256()
    for t in tensors:
        t = t.detach().cpu().to(torch.int64).contiguous()
        h.update(repr(tuple(t.shape)).encode())
        h.update(t.numpy().tobytes())
    return h.hexdigest()


def sha_text(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()


def digests() -> dict[str, str]:
    """Every digest the test checks, computed by the current code."""
    out: dict[str, str] = {}
    paper = TaskConfig()
    split = Split.from_task(paper)
    out["split_p59"] = sha(split.train_pairs, split.heldout_pairs, split.two_var_counts)
    out["split_p59_r0.3"] = sha(Split.from_task(paper.replace(r=0.3)).two_var_counts)
    out["training_rows_p59"] = sha(training_rows(split))
    sampler = TrainingSampler(split, 64, seed=7)
    for step in (0, 123):
        b = sampler.batch(step)
        out[f"batch_p59_step{step}"] = sha(b.tokens, b.labels, b.rows)
    sample = sampler.sample(300, derived_generator(7, 9))
    out["sample_p59"] = sha(sample.tokens, sample.labels, sample.rows)
    out["text_p59"] = sha_text("\n".join(to_text(paper, t) for t in sample.tokens[:60].tolist()))
    out["token_text_p59"] = sha_text("\n".join(to_token_string(paper, t) for t in sample.tokens[:60].tolist()))
    pools = make_pools(split, size=300, seed=3)
    out["pool_names"] = sha_text(",".join(pools))
    for name, pool in pools.items():
        out[f"pool_p59_{name}"] = sha(pool.tokens, pool.labels, pool.rows)
    out["zero_var_heldout_p59"] = sha(make_exhaustive(split, "zero_var_heldout").tokens)
    # a small task with other slots, a longer context and the exhaustive 2-var union
    small = TaskConfig(modulus=11, n_vars=6, seq_len=20, max_assignments=6, left_forbidden=("f",),
                       right_forbidden=("a",), f=0.6, r=0.5, seed=5)
    small_split = Split.from_task(small)
    out["split_p11"] = sha(small_split.train_pairs, small_split.heldout_pairs, small_split.two_var_counts)
    union = make_exhaustive(small_split, "two_var_union", seed=2)
    out["two_var_union_p11"] = sha(union.tokens, union.labels, union.rows)
    rows = torch.tensor([[3, 4, 0, 1], [5, 6, -1, 2], [1, 1, -1, -1], [2, 9, 3, -1], [0, 0, -2, -2]])
    rendered = render(small_split, rows, derived_generator(11, 0), two_var_n="uniform")
    out["render_p11"] = sha(rendered.tokens, rendered.labels, rendered.rows)
    small_pools = make_pools(small_split, size=50, seed=0)
    out["pools_p11"] = sha(*[p.tokens for p in small_pools.values()])
    out["parse_p59"] = sha(torch.tensor([parse_sequence(paper, s) for s in (
        "b=7, e=5, d=2, b+23=?", "a=0, 58+a=?", "PAD b 7 PAD e 5 PAD d 5 PAD PAD PAD + b d =", "c=1, 3+4=?")]))
    out["task_json"] = sha_text(json.dumps(paper.to_dict(), sort_keys=True))
    # Hashed under the model key's earlier name (issue #28 renamed mlp_layers to mlp_blocks, the
    # name saying it counts 0-based blocks): the digest then still proves that nothing but the
    # name changed in the study's run config.
    run = RunConfig().to_dict()
    run["model"]["mlp_layers"] = run["model"].pop("mlp_blocks")
    out["run_json"] = sha_text(json.dumps(run, sort_keys=True))
    out["vocab"] = sha(torch.tensor([paper.d_vocab, paper.pad_token, paper.first_var_token, small.d_vocab]))
    return out


EXPECTED = {
    "split_p59": "2bd7f24af949d2dfe914873daac0a6b3fa275c73f1f88bb44c47e7cb4bb77887",
    "split_p59_r0.3": "f108bc95420838deda94826ee0b7d070ed774733d364be0c1d2ac1904349fd12",
    "training_rows_p59": "a66fd32a376055eca57ebbd7d937d3f4ed9512f743f820e8867297d9b384d692",
    "batch_p59_step0": "526cbe3b82c0f69cd90ac97d37708ea5d8c70510cd7d7553b3cd72bd1042a141",
    "batch_p59_step123": "083685107b90987e2f40b3b44e7b998db5323e1548298b61a7462e9c32efe40e",
    "sample_p59": "119b9afee8c3adfa1a6a1ae7014245c5b2f371a9ee8d1ea13b63932a837a91d8",
    "text_p59": "7693d3838247d52cb73feb81b5b1d5cd992e3ae5cad23eafb92cd25de00c0dd1",
    "token_text_p59": "0d238c869267ec26edd3e61defbe037cd47ae557733dd85748ad1e0469503874",
    "pool_names": "d6a52df942024a7dcfe21083d43028763d02eaae3acf39a9c6f7d4cdb461e861",
    "pool_p59_0var_train": "0e16df78192016f2d2ff4e195f739d05ae435dc0c6057de5829a7a9601a41109",
    "pool_p59_0var_add_restricted": "9dd414f7433f79e72f5c6e5a0ee393e8b34a1555df0c50f5bf2b641be70b7473",
    "pool_p59_1var_train": "39a2c61f0bc72f971473de19ef7a477bc2db005b17d2e203693bf627aa15c1a6",
    "pool_p59_1var_add_restricted": "a995421966a330cbe5b944c8f7c611805a5908ad879010a7d8e3070f8a252f74",
    "pool_p59_1var_var_restricted": "22f9b43d61b6295d2a1559bc7b947a82d8e0663a49f9a39f02201fbe1326f5a8",
    "pool_p59_2var_train": "55776971c91918d56bced29add5219789e763a34d5ba693f1c62b80e71bed7a4",
    "pool_p59_2var_add_restricted": "77237a18700a383396975dd62cfe494af2e2131c0c8f364236c9baba5a3041d5",
    "pool_p59_2var_var_restricted_1": "96a2262c86ff1851257d6bc8f03c4cc22e97c7d4c08314f688c3620fa9ae1f35",
    "pool_p59_2var_var_restricted_2": "1abbc88375b7d5aa64d4be3fc682e05e7d2cd906f3494666f3cf8fe5b817b0df",
    "zero_var_heldout_p59": "d695fa3de853c8f3657bd6744ccd8794b8c17c5bb79a49bb3ac81b1cfaa6920e",
    "split_p11": "f0bf802c226bd5e352c40e2c1b7d88508c5189e658c516cd2ca1452cb9348d9b",
    "two_var_union_p11": "8f4429fae791d8fe1d94aa9f2dfd0a49de8d40d8b6b69852d0beb513a9058abf",
    "render_p11": "85b3d234fe98394cca278d2ce282f66163594edbed0b034381b6635af48801dd",
    "pools_p11": "fc4f77ad95242c8133615db437beea4cce919ce5c784062bbc76626fcf63b48d",
    "parse_p59": "02173f0b81d63c7ce8c1cdc39821f043ea654a93cb1e11d26265d4a458f30735",
    "task_json": "db0b5e52924c2ded748630a4e7c1deceb0bd75d972c3ec63036ae59d65d36d6e",
    "run_json": "df4304c6d5266d41cd8c0c3c348840c86dcee26e09447f5a5ab8bd5379d49a59",
    "vocab": "ad17488ab28528bb7a3a6ce2b933ec0a6994b51ffa53a8435084154b5a113120",
}


@pytest.fixture(scope="module")
def current() -> dict[str, str]:
    return digests()


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_default_task_is_bit_identical(current, name):
    assert current[name] == EXPECTED[name], f"{name} changed: the study's default task is no longer bit-identical"


def test_every_digest_is_checked(current):
    assert sorted(current) == sorted(EXPECTED)
