"""Dump what every hand-written forward computes on one model, to check a refactor bit for bit.

Run it on the code before and after a change (PYTHONPATH picks the copy), then compare the two
dumps with ``torch.equal`` (not allclose):

    PYTHONPATH=/path/to/old python experiments/forward_dump.py dump before.pt [--model paper]
    PYTHONPATH=.            python experiments/forward_dump.py dump after.pt  [--model paper]
    python experiments/forward_dump.py compare before.pt after.pt

What is dumped: the table forward's activations and its ablation form (no edit, one edit), the
last-position forward's logits and layer-1 pattern, the patching engine's sweep over every site
(value and constant corruptions), and the circuit graph's clean logits and exact / EAP / EAP-IG
scores on both graphs; then, on randomly initialised 3-layer x 2-head (MLPs everywhere) and
2-layer x 4-head models, the last-position forward, the graph and the patching engine's logits.
"""

from __future__ import annotations

import argparse
import sys

import torch

from compose_lens.registry.circuit import discovery as C
from compose_lens.core import capabilities
from compose_lens.data import pairs as prompt_pairs
from compose_lens.core.config import RunConfig
from compose_lens.data.sampler import make_pool
from compose_lens.model import fastpath, lastpos, patch_engine, tl
from compose_lens.registry.patching import tables
from compose_lens.training.subject import load_model


def dump(model_spec: str) -> dict[str, torch.Tensor]:
    torch.set_num_threads(1)
    out = {}
    loaded = load_model(model_spec)
    cfg = loaded.config.model
    params = {k: v.detach().float() for k, v in tl.parameters(loaded.model).items()}
    tokens = make_pool(loaded.split, "1var_train", 256, 0).tokens
    acts = fastpath.forward_at_answer(params, cfg, tokens)
    out.update({f"tables.{f}": getattr(acts, f) for f in acts.__dataclass_fields__})
    out["edited.none"] = fastpath.edited_answer_logits(params, cfg, tokens, {})
    out["edited.z0"] = fastpath.edited_answer_logits(params, cfg, tokens, {"blocks.0.attn.hook_z": lambda a: a * 0.5})
    out["lastpos.logits"] = lastpos.last_position_logits(params, cfg, tokens)
    resid = params["embed.weight"][tokens] + params["pos_embed.weight"][: tokens.shape[1]]
    out["lastpos.attn0"], out["lastpos.pattern0"] = lastpos.attention_with_pattern(params, cfg, 0, resid)
    sites = tables.all_sites(cfg)
    for corruption in ("value", "constant"):
        pairs = prompt_pairs.make_prompt_pairs(loaded.split, 40, corruption)
        out[f"patch.{corruption}"] = tables.patched_values(loaded.model, cfg, pairs, sites)
    for positions in (False, True):
        gm = C.GraphModel.from_model(loaded.model, cfg, positions)
        pairs = C.circuit_pairs(loaded.split, 30)
        base = C.baseline(gm, pairs)
        out[f"graph{positions}.clean"] = base.clean_logits
        for name, fn in (("exact", C.exact_scores), ("eap", C.eap_scores), ("eap-ig", C.eap_ig_scores)):
            out[f"graph{positions}.{name}"] = fn(gm, pairs, base)
    for name, over in {"3x2_mlps": ["n_layers=3", "n_heads=2", "mlp_blocks=[0,1,2]", "d_head=32"],
                       "2x4": ["n_heads=4", "d_head=32"]}.items():
        c = RunConfig().with_overrides(over)
        torch.manual_seed(0)
        m = tl.boot(c.model)
        p = {k: v.detach().float() for k, v in tl.parameters(m).items()}
        out[f"{name}.lastpos"] = lastpos.last_position_logits(p, c.model, tokens[:64])
        out[f"{name}.graph"] = C.GraphModel(p, c.model).forward(tokens[:64])[0]
        if capabilities.supports(c.model, "patching"):
            out[f"{name}.patching"] = patch_engine.Engine(m, c.model).run(tokens[:64])["logits"]
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    sub = parser.add_subparsers(dest="command", required=True)
    d = sub.add_parser("dump")
    d.add_argument("out")
    d.add_argument("--model", default="paper")
    c = sub.add_parser("compare")
    c.add_argument("before")
    c.add_argument("after")
    args = parser.parse_args()
    if args.command == "dump":
        torch.save(dump(args.model), args.out)
        return
    a, b = torch.load(args.before), torch.load(args.after)
    differ = [k for k in a if k not in b or not torch.equal(a[k], b[k])]
    for k in a:
        print(("DIFFERENT " if k in differ else "equal     ") + k)
    print(f"{len(a) - len(differ)} of {len(a)} bit-identical")
    sys.exit(1 if differ else 0)


if __name__ == "__main__":
    main()
