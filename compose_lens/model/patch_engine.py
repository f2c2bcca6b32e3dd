"""The batched patching engine: every site of the study's architecture patched at once, from the weights.

Activation patching (:mod:`compose_lens.registry.patching.tables`) runs the corrupted prompts with one
site's activation taken from the clean prompts; ``transformer_lens.patching`` runs one full forward of
the whole batch per site (192 for the paper model). For the study's architecture (two layers, an MLP in
the last one only, no normalisation; any heads and biases: ``capabilities.why_not(cfg, "patching")``)
:func:`patched_values` computes the same numbers, all sites of a kind at once on a (prompts x sites) batch:

* only the logits at ``=`` are read and layer 2 is the last layer, so layer 2 is needed at ``=`` only
  (its keys and values at every position): a layer-2 site before ``=`` other than ``resid_pre`` leaves
  the output exactly as in the corrupted run;
* patching one position of ``blocks.1.hook_resid_pre`` changes one key row and one value row: the
  corrupted keys with that row swapped, no new matrix products;
* every layer-1 site except ``resid_pre`` only changes ``blocks.1.hook_resid_pre`` at its own position:
  the case above with another replacement vector;
* ``blocks.0.hook_resid_pre`` needs a layer-1 recompute, again batched over sites.

:meth:`compose_lens.model.forward.Forward.patched` takes this engine where it is exact;
``experiments/bench_patching.py`` checks it against the TransformerLens loop.
"""

from __future__ import annotations

from typing import Callable

import torch

from compose_lens.core.config import ModelConfig
from compose_lens.model import heads, tl, weights

COMPONENTS = ("resid_pre", "resid_mid", "resid_post", "attn_out", "mlp_out", "z")  # what the engine patches
Measure = Callable[[torch.Tensor, torch.Tensor], torch.Tensor]  # (logits (R, V), prompt rows (R,)) -> (R,)


class Engine:
    """The weights in the nn.Linear layout, detached, with the forward pieces patching needs."""

    def __init__(self, model: tl.Model, cfg: ModelConfig):
        params = {k: v.detach().float() for k, v in tl.parameters(model).items()}
        self.p, self.cfg = params, cfg
        self.H, self.dh = cfg.n_heads, cfg.d_head

    def heads(self, x: torch.Tensor, layer: int, kind: str) -> torch.Tensor:
        """q / k / v of ``x`` (..., d) as (..., H, d_head)."""
        return heads.split_heads(heads.project(self.p, self.cfg, layer, kind, x, bias=True), self.H)

    def attn_out(self, z: torch.Tensor, layer: int) -> torch.Tensor:
        """(..., H, d_head) -> (..., d): the head outputs through W_O."""
        return heads.write(self.p, self.cfg, layer, z.flatten(-2), bias=True)

    def embed(self, tokens: torch.Tensor) -> torch.Tensor:
        return self.p["embed.weight"][tokens] + self.p["pos_embed.weight"][: tokens.shape[1]]

    def layer0(self, resid_pre0: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Causal attention of blocks.0 over all positions: z0 (R, n, H, dh), attn_out0 (R, n, d)."""
        q, k, v = (self.heads(resid_pre0, 0, s) for s in "qkv")
        pattern = heads.pattern(heads.scale(torch.einsum("rihd,rjhd->rhij", q, k), self.dh), self.cfg.read_order)
        z = torch.einsum("rhij,rjhd->rihd", pattern, v)
        return z, self.attn_out(z, 0)

    def layer2_last(self, k1: torch.Tensor, v1: torch.Tensor, resid_last: torch.Tensor,
                    site=None, clean: dict | None = None,
                    q: torch.Tensor | None = None) -> dict[str, torch.Tensor]:
        """Layer 2 at the last position from its keys/values (R, n, H, dh) and resid_pre1[-1] (R, d): every
        component a site can read there, and the logits; ``site`` (there) patched with ``clean[component]``."""
        def patch(component: str, value: torch.Tensor) -> torch.Tensor:
            if site is None or site.component != component:
                return value
            if component == "z":
                value = value.clone()
                value[:, site.head] = clean["z"][:, site.head]
                return value
            return clean[component]

        resid_last = patch("resid_pre", resid_last)
        q = self.heads(resid_last, 1, "q") if q is None else q  # (R, H, dh)
        pattern = heads.pattern(heads.scale(torch.einsum("rhd,rjhd->rhj", q, k1), self.dh).unsqueeze(-2)).squeeze(-2)
        return self.after_attention(patch("z", torch.einsum("rhj,rjhd->rhd", pattern, v1)), resid_last, patch)

    def after_attention(self, z: torch.Tensor, resid_last: torch.Tensor,
                        patch=lambda component, value: value) -> dict[str, torch.Tensor]:
        """Layer 2 at the last position from its head outputs z (R, H, dh) on: see :meth:`layer2_last`."""
        attn_out = patch("attn_out", self.attn_out(z, 1))
        resid_mid = patch("resid_mid", resid_last + attn_out)
        mlp_out = patch("mlp_out", weights.mlp_out(self.p, self.cfg, resid_mid)[2])
        resid_post = patch("resid_post", resid_mid + mlp_out)
        return {"resid_pre": resid_last, "z": z, "attn_out": attn_out, "resid_mid": resid_mid,
                "mlp_out": mlp_out, "resid_post": resid_post, "logits": weights.unembed(self.p, self.cfg, resid_post)}

    def run(self, tokens: torch.Tensor) -> dict[str, torch.Tensor]:
        """Every activation a site can read, for a batch of prompts."""
        resid_pre0 = self.embed(tokens)
        z0, attn_out0 = self.layer0(resid_pre0)
        resid_mid0 = resid_pre0 + attn_out0
        resid_pre1 = resid_mid0  # blocks.0 has no MLP: its output is exactly zero
        k1, v1 = self.heads(resid_pre1, 1, "k"), self.heads(resid_pre1, 1, "v")
        q = self.heads(resid_pre1[:, -1], 1, "q")  # (N, H, dh)
        last = self.layer2_last(k1, v1, resid_pre1[:, -1], q=q)
        return {"resid_pre0": resid_pre0, "z0": z0, "attn_out0": attn_out0, "resid_mid0": resid_mid0,
                "resid_pre1": resid_pre1, "k1": k1, "v1": v1, "q1": q, "logits": last.pop("logits"),
                "last": last}


def _layer0_replacement(site, clean: dict, corrupt: dict, W: Engine) -> torch.Tensor:
    """blocks.1.hook_resid_pre at ``site.position`` after patching a layer-1 site there (N, d)."""
    i = site.position
    if site.component == "attn_out":
        return corrupt["resid_pre0"][:, i] + clean["attn_out0"][:, i]
    if site.component == "z":
        z = corrupt["z0"][:, i].clone()
        z[:, site.head] = clean["z0"][:, i, site.head]
        return corrupt["resid_pre0"][:, i] + W.attn_out(z, 0)
    if site.component == "resid_mid":
        return clean["resid_mid0"][:, i]
    if site.component == "resid_post":
        return clean["resid_pre1"][:, i]
    if site.component == "mlp_out":  # zero in both runs: the patch leaves the corrupted stream
        return corrupt["resid_mid0"][:, i]
    raise AssertionError(site)


def _row_patched_logits(W: Engine, corrupt: dict, positions: torch.Tensor,
                        replacement: torch.Tensor) -> torch.Tensor:
    """Logits (N, S, V) when blocks.1.hook_resid_pre at ``positions[s]`` becomes ``replacement[:, s]``: the
    query's scores against the corrupted keys with the patched row's swapped in, and ``z = pattern
    V_corrupted + pattern[p] (v_new - v_p)``. Nothing of size (sites x positions x d) is built."""
    N, S = replacement.shape[:2]
    n = corrupt["k1"].shape[1]
    at_last = positions == n - 1
    last = corrupt["resid_pre1"][:, -1].unsqueeze(1).expand(N, S, -1).clone()
    last[:, at_last] = replacement[:, at_last]
    q = corrupt["q1"].unsqueeze(1).expand(N, S, *corrupt["q1"].shape[1:]).clone()  # (N, S, H, dh)
    q[:, at_last] = W.heads(replacement[:, at_last], 1, "q")
    k_new, v_new = W.heads(replacement, 1, "k"), W.heads(replacement, 1, "v")  # (N, S, H, dh)
    scores = heads.scale(torch.einsum("nshd,njhd->nshj", q, corrupt["k1"]), W.dh)
    row = positions.view(1, S, 1, 1).expand(N, S, W.H, 1)
    scores.scatter_(-1, row, heads.scale((q * k_new).sum(-1, keepdim=True), W.dh))
    pattern = heads.pattern(scores.unsqueeze(-2)).squeeze(-2)  # (N, S, H, n): from "=", every key
    z = (torch.einsum("nshj,njhd->nshd", pattern, corrupt["v1"])
         + pattern.gather(-1, row) * (v_new - corrupt["v1"][:, positions]))
    return W.after_attention(z.flatten(0, 1), last.flatten(0, 1))["logits"].view(N, S, -1)


def _embed_patched_logits(W: Engine, clean: dict, corrupt: dict, positions: torch.Tensor) -> torch.Tensor:
    """Logits (N, S, V) when blocks.0.hook_resid_pre at ``positions[s]`` is patched from the clean run.

    One row of layer 1's queries, keys and values changes, and layer 2 reads layer 1 through linear maps,
    so everything per position is pushed through W_O and layer 2's W_K / W_V once per prompt
    (``K1 = resid_pre0 W_K1 + sum_h A_h (v_h W_O,h W_K1)``); only the pattern is recomputed per site, each
    sum over the patched table being the corrupted one's plus the patched row's correction. Of size
    (sites x positions x d) only layer 2's keys and values are built.
    """
    N, S = len(corrupt["resid_pre0"]), len(positions)
    H, dh = W.H, W.dh
    W_O = W.p["blocks.0.attn.o.weight"].T.unflatten(0, (H, dh))  # (H, dh, d)

    def tables(run: dict) -> dict:
        resid = run["resid_pre0"]
        v0 = W.heads(resid, 0, "v")
        vo = torch.einsum("nihd,hde->nihe", v0, W_O)  # (N, n, H, d): what each head writes
        return {"q0": W.heads(resid, 0, "q"), "k0": W.heads(resid, 0, "k"), "vo": vo,
                "rk": resid @ W.p["blocks.1.attn.k.weight"].T, "rv": resid @ W.p["blocks.1.attn.v.weight"].T,
                "vok": vo @ W.p["blocks.1.attn.k.weight"].T, "vov": vo @ W.p["blocks.1.attn.v.weight"].T,
                "resid": resid}

    cor, cle = tables(corrupt), tables(clean)
    new = {name: table[:, positions] for name, table in cle.items()}  # the patched row of each site
    n = cor["resid"].shape[1]
    row = torch.nn.functional.one_hot(positions, n).bool()  # (S, n): where each site's row sits
    # layer-1 scores: the corrupted ones with the patched query row and key column swapped in
    scores = heads.scale(torch.einsum("nihd,njhd->nhij", cor["q0"], cor["k0"]).unsqueeze(1), dh)  # (N, 1, H, n, n)
    column = heads.scale(torch.einsum("nihd,nshd->nshi", cor["q0"], new["k0"]), dh)  # (N, S, H, n)
    query_row = heads.scale(torch.einsum("nshd,njhd->nshj", new["q0"], cor["k0"]), dh)  # (N, S, H, n)
    query_row = torch.where(row.view(1, S, 1, n), heads.scale((new["q0"] * new["k0"]).sum(-1, keepdim=True), dh),
                            query_row)
    scores = torch.where(row.view(1, S, 1, 1, n), column.unsqueeze(-1), scores)
    scores = torch.where(row.view(1, S, 1, n, 1), query_row.unsqueeze(-2), scores)
    A = heads.pattern(scores, W.cfg.read_order)  # (N, S, H, n, n)
    at_row = A.gather(-1, positions.view(1, S, 1, 1, 1).expand(N, S, H, n, 1)).squeeze(-1)  # (N, S, H, n)

    def through_layer1(name: str) -> torch.Tensor:
        """sum_j A_ij table_j over the patched table: the corrupted rows, then the one patched row."""
        return (torch.einsum("nshij,njhe->nsie", A, cor[name])
                + torch.einsum("nshi,nshe->nsie", at_row, new[name] - cor[name][:, positions]))

    def patched_rows(name: str) -> torch.Tensor:  # (N, S, n, e)
        return torch.where(row.view(1, S, n, 1), new[name].unsqueeze(2), cor[name].unsqueeze(1))

    b_O = W.p["blocks.0.attn.o.bias"]
    k1 = (patched_rows("rk") + through_layer1("vok")
          + b_O @ W.p["blocks.1.attn.k.weight"].T + W.p["blocks.1.attn.k.bias"]).unflatten(-1, (H, dh))
    v1 = (patched_rows("rv") + through_layer1("vov")
          + b_O @ W.p["blocks.1.attn.v.weight"].T + W.p["blocks.1.attn.v.bias"]).unflatten(-1, (H, dh))
    last = (patched_rows("resid")[:, :, -1] + torch.einsum("nshj,njhe->nse", A[:, :, :, -1], cor["vo"])
            + torch.einsum("nsh,nshe->nse", at_row[..., -1], new["vo"] - cor["vo"][:, positions]) + b_O)
    return W.layer2_last(k1.flatten(0, 1), v1.flatten(0, 1), last.flatten(0, 1))["logits"].view(N, S, -1)


def patched_values(W: Engine, clean_tokens: torch.Tensor, corrupted_tokens: torch.Tensor, sites: list,
                   measure: Measure, rows: torch.Tensor) -> torch.Tensor:
    """``measure``'s values (S, N) of the corrupted prompts (N, n) with each site patched from the clean
    ones, for one chunk of prompts (``rows``: their indices, handed to ``measure``)."""
    clean, corrupt = W.run(clean_tokens), W.run(corrupted_tokens)
    N, n = clean_tokens.shape
    corrupted_ld = measure(corrupt["logits"], rows)
    out = torch.empty(len(sites), N)

    def diffs(logits: torch.Tensor) -> torch.Tensor:  # (N, S, V) -> (S, N), site-major rows
        S = logits.shape[1]
        return measure(logits.transpose(0, 1).reshape(S * N, -1), rows.repeat(S)).view(S, N)

    # layer-1 sites other than resid_pre: a replacement row of blocks.1.hook_resid_pre.
    # blocks.0 has no MLP (its output is zero in both runs): patching it changes nothing.
    # blocks.0.hook_resid_post is blocks.1.hook_resid_pre: computed once, copied.
    for j, s in enumerate(sites):
        if s.layer == 0 and s.component == "mlp_out":
            out[j] = corrupted_ld
    row_sites = [j for j, s in enumerate(sites)
                 if s.layer == 0 and s.component in ("attn_out", "z", "resid_mid")]
    row_sites += [j for j, s in enumerate(sites) if s.layer == 1 and s.component == "resid_pre"]
    if row_sites:
        replacement = torch.stack([
            clean["resid_pre1"][:, sites[j].position] if sites[j].layer == 1
            else _layer0_replacement(sites[j], clean, corrupt, W) for j in row_sites], dim=1)
        positions = torch.tensor([sites[j].position for j in row_sites])
        out[row_sites] = diffs(_row_patched_logits(W, corrupt, positions, replacement))
        same = {sites[j].position: j for j in row_sites if sites[j].layer == 1}
        for j, s in enumerate(sites):
            if s.layer == 0 and s.component == "resid_post":
                out[j] = out[same[s.position]] if s.position in same else torch.nan

    # blocks.0.hook_resid_pre: a layer-1 recompute per site, batched over sites
    embed_sites = [j for j, s in enumerate(sites) if s.layer == 0 and s.component == "resid_pre"]
    if embed_sites:
        positions = torch.tensor([sites[j].position for j in embed_sites])
        out[embed_sites] = diffs(_embed_patched_logits(W, clean, corrupt, positions))

    # layer-2 sites other than resid_pre: only the last position is read by anything
    for j, s in enumerate(sites):
        if s.layer == 1 and s.component != "resid_pre":
            if s.position < n - 1:
                out[j] = corrupted_ld
            else:
                patched = W.layer2_last(corrupt["k1"], corrupt["v1"], corrupt["resid_pre1"][:, -1],
                                        site=s, clean=clean["last"])
                out[j] = measure(patched["logits"], rows)
    return out
