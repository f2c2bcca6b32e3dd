"""One forward for every analysis: the model's activations and answer at ``=``, read or edited at a :class:`Site`.

An analysis asks the model three things: its answer logits at ``=``, some activations on the way there,
and its answer with some activations replaced. compose-lens computes these in three ways
(:mod:`compose_lens.core.capabilities` says which is exact for which architecture):

* **the tables** (:mod:`compose_lens.model.fastpath`): the paper architecture's answer from score tables
  over the vocabulary and the positions, with no (batch, positions, d_model) tensor and no bridge. It has
  the activations the answer is made of (:data:`TABLE_SITES`) and edits the four it is arranged around
  (:data:`compose_lens.model.fastpath.EDITABLE_HOOKS`);
* **the last-position forward** (:mod:`compose_lens.model.lastpos`): plain torch for any depth and head
  count without normalisation, its activations read and edited as they are made, with no hooks;
* **the TransformerLens bridge**: every hook of any architecture (booted from the weights where the
  subject holds only those).

A :class:`Forward` makes that choice per request, in that order: :meth:`Forward.read`,
:meth:`Forward.edited_logits` and :meth:`Forward.logits` answer from the first that computes every site
asked for (and every edit). They give the same numbers up to float rounding (tests/unit/test_forward.py),
so an analysis is written once, in :class:`Site` terms. The trainer, the evaluations and the LLC step
the answer with its gradients (:meth:`Forward.answer_forward`); activation patching edits many sites,
each alone, in one batched operation (:meth:`Forward.patched`), path patching its two runs
(:meth:`Forward.path_patched`); :meth:`Forward.logits_from` and :meth:`Forward.mlp_from` run the model on
from a residual stream or an MLP input built by hand, and :meth:`Forward.lens` is the logit lens.

**One vocabulary for where.** A :class:`Site` is a TransformerLens hook name, a position and a head:
``Site("blocks.1.hook_mlp_out", "=")`` is MLP2's output at the answer position,
``Site("blocks.0.attn.hook_pattern", head=0)`` the layer-1 pattern at every query. A position is
``None`` (every position: the axis is kept), ``"="`` (the answer position, the last) or an index (the
axis is dropped); a head is ``None`` (every head: the axis is kept) or an index. Patching tables name
their rows by sites; an analysis whose position differs per sequence resolves it itself (DAS's
:meth:`~compose_lens.registry.das.search.BindingSite.where`). The same sites name interventions:
``{Site("blocks.0.attn.hook_z", 5, 0): torch.zeros_like}`` zeroes layer 1's head at position 5 on either
forward. Besides TransformerLens's own hooks there is ``blocks.L.attn.hook_result``: what each head
writes into the residual stream (``hook_z`` through its slice of ``W_O``, without the output bias), so
direct logit attribution is one read.

>>> site = Site.parse("blocks.1.hook_mlp_out@=")
>>> site, site.layer, str(site)
(Site(hook='blocks.1.hook_mlp_out', position='=', head=None), 1, 'blocks.1.hook_mlp_out@=')
>>> str(Site("blocks.0.attn.hook_pattern", head=0))
'blocks.0.attn.hook_pattern[0]'
"""

from __future__ import annotations

import functools
import numbers
import re
from dataclasses import dataclass, replace
from typing import Callable, Iterable, Mapping

import numpy as np
import torch

from compose_lens.core.config import ModelConfig
from compose_lens.core import capabilities
from compose_lens.core.errors import ArgumentError, ArgumentTypeError, ComposeLensError
from compose_lens.model import fastpath, lastpos, patch_engine, tl, weights

ANSWER = "="  # the answer position: the last of every sequence
Edit = Callable[[torch.Tensor], torch.Tensor]  # an activation in, what to write in its place out


@dataclass(frozen=True)
class Site:
    """Where to read or intervene: a hook, a position (None: every one; ``"="``: the answer's; an index)
    and a head (None: every head). See the module doc."""

    hook: str
    position: int | str | None = None
    head: int | None = None

    _TEXT = re.compile(r"^(?P<hook>[\w.]+)(?:\[(?P<head>\d+)\])?(?:@(?P<position>=|-?\d+))?$")

    def __post_init__(self) -> None:
        """Each part of the type it is read as (its range is the model's: :meth:`Forward.read` checks it)."""
        if not isinstance(self.hook, str) or not self.hook:
            raise ArgumentTypeError(f"Site hook={self.hook!r}: give a TransformerLens hook name, e.g. "
                                    f"'blocks.1.hook_mlp_out' or 'blocks.0.attn.hook_pattern'")
        for part in ("position", "head"):  # a numpy or torch integer (a table's column) is that integer
            value = getattr(self, part)
            if _is_index(value) and type(value) is not int:
                object.__setattr__(self, part, int(value))
        if not (self.position is None or self.position == ANSWER or _is_index(self.position)):
            raise ArgumentTypeError(f"Site position={self.position!r}: give None (every position), '=' (the "
                                    f"answer's) or an integer index")
        if not (self.head is None or _is_index(self.head)):
            raise ArgumentTypeError(f"Site head={self.head!r}: give None (every head) or an integer index")
        if self.head is not None and self.head < 0:
            raise ArgumentError(f"Site head={self.head}: heads are numbered from 0")

    @classmethod
    def parse(cls, text: str) -> "Site":
        """``hook[head]@position``, each part but the hook optional (``blocks.1.attn.hook_pattern[0]@=``)."""
        found = cls._TEXT.match(text.strip())
        if found is None:
            raise ComposeLensError(f"site {text!r}: write HOOK[HEAD]@POSITION, e.g. blocks.1.hook_mlp_out@= "
                                   f"or blocks.0.attn.hook_pattern[0]")
        position = found["position"]
        return cls(found["hook"], position if position in (None, ANSWER) else int(position),
                   None if found["head"] is None else int(found["head"]))

    def __str__(self) -> str:
        head = "" if self.head is None else f"[{self.head}]"
        return self.hook + head + ("" if self.position is None else f"@{self.position}")

    @functools.cached_property
    def layer(self) -> int | None:
        """The block the hook belongs to (None for the embeddings)."""
        found = re.match(r"blocks\.(\d+)\.", self.hook)
        return None if found is None else int(found[1])

    @functools.cached_property
    def component(self) -> str:
        """The hook's short name within its block, as patching tables name it: ``resid_pre``,
        ``attn_out``, ``mlp_out``, ``z``, ``q``, ``pattern``, ``mlp_pre`` (see
        :data:`compose_lens.model.tl.PATCH_HOOKS`)."""
        for name, template in tl.PATCH_HOOKS.items():
            if template.format(layer=self.layer) == self.hook:
                return name
        return self.hook.rsplit(".", 1)[-1].removeprefix("hook_")

    def at(self, position: int | str | None) -> "Site":
        return replace(self, position=position)


# the answer logits at "=" as a pure function of (params, cfg, tokens), by :attr:`Forward.kind`
ANSWERS = {"tables": fastpath.last_position_logits, "lastpos": lastpos.last_position_logits}
Edits = Mapping[str | Site, Edit] | Iterable[tuple[str | Site, Edit]]  # by hook (all of it) or by Site


def _is_index(value) -> bool:
    """An integer (Python's, numpy's or a 0-d integer tensor's), not a bool."""
    if isinstance(value, torch.Tensor):
        return value.dim() == 0 and not value.is_floating_point() and not value.is_complex() \
            and value.dtype != torch.bool
    return isinstance(value, numbers.Integral) and not isinstance(value, (bool, np.bool_))


def check_tokens(tokens, d_vocab: int, n_ctx: int, exact: bool = False, name: str = "tokens") -> None:
    """Refuse, in one line naming ``name``, what is not (N, n) integer token ids of a vocabulary of
    ``d_vocab`` with 1 <= n <= ``n_ctx`` (``exact``: n == ``n_ctx``): a list, floats, one row without its
    batch axis, an id outside the vocabulary (it would index another row, or fail inside)."""
    if not isinstance(tokens, torch.Tensor):
        raise ArgumentTypeError(f"{name}: {type(tokens).__name__}, not a tensor; give a torch tensor of token ids "
                                f"(N, n), e.g. torch.tensor([...])")
    if tokens.is_floating_point() or tokens.is_complex() or tokens.dtype == torch.bool:
        raise ArgumentTypeError(f"{name}: {str(tokens.dtype).removeprefix('torch.')} values; token ids are "
                                f"integers: give a torch.long tensor")
    if tokens.dim() != 2 or len(tokens) == 0:
        raise ArgumentError(f"{name}: shape {tuple(tokens.shape)}; give (N, n) rows of token ids, N >= 1 "
                            f"(one sequence: tokens.unsqueeze(0))")
    n = tokens.shape[1]
    if (n != n_ctx) if exact else not 1 <= n <= n_ctx:
        raise ArgumentError(f"{name}: rows of {n} tokens; the model reads "
                            f"{n_ctx if exact else f'1 to {n_ctx}'} (its sequences are {n_ctx} long)")
    low, high = int(tokens.min()), int(tokens.max())
    if low < 0 or high >= d_vocab:
        raise ArgumentError(f"{name}: token id {low if low < 0 else high} is outside the vocabulary "
                            f"0..{d_vocab - 1}")


def _check_sites(sites, cfg: ModelConfig, n: int, what: str = "sites") -> list[Site]:
    """``sites`` as a list of :class:`Site`, each one's block, head and position within the model's
    (the hook name itself is checked where the bridge reads it: :meth:`Forward._read_hooks`)."""
    if isinstance(sites, (Site, str)) or not isinstance(sites, Iterable):
        raise ArgumentTypeError(f"{what}: give a list of Site objects, e.g. [Site('blocks.1.hook_mlp_out', '=')]"
                                f", not {type(sites).__name__}")
    sites = list(sites)
    for site in sites:
        if not isinstance(site, Site):
            raise ArgumentTypeError(f"{what}: {site!r} is not a Site; write Site('blocks.1.hook_mlp_out', '=') "
                                    f"(or Site.parse('blocks.1.hook_mlp_out@='))")
        if site.layer is not None and site.layer >= cfg.n_layers:
            raise ArgumentError(f"site {site}: the model has {cfg.n_layers} block(s), blocks.0..blocks.{cfg.n_layers - 1}")
        if site.head is not None and site.head >= cfg.n_heads:
            raise ArgumentError(f"site {site}: the model has {cfg.n_heads} head(s) per block, 0..{cfg.n_heads - 1}")
        if _is_index(site.position) and not -n <= site.position < n:
            raise ArgumentError(f"site {site}: position {site.position} is outside the {n} positions of the tokens")
    return sites


def _answer_tables(params: dict[str, torch.Tensor], cfg: ModelConfig, tokens: torch.Tensor) -> dict:
    """Every activation the tables compute, keyed by (hook, position): (B, ...) at ``=``, and (B, n, ...)
    for layer 1's at every position; a function where it costs work beyond the answer's own forward."""
    acts = fastpath.forward_at_answer(params, cfg, tokens)
    token = params["embed.weight"][tokens[:, -1]]
    place = params["pos_embed.weight"][tokens.shape[1] - 1].expand(len(tokens), -1)

    def mlp_out() -> torch.Tensor:  # MLP2 once more, from its input: only where a read asks for its output
        return weights.mlp_out(params, cfg, acts.resid_mid1_last, 1)[2]

    after_layer1 = acts.resid_mid0_last
    head0, head1 = after_layer1 - token - place, acts.resid_mid1_last - after_layer1
    return {
        ("hook_embed", ANSWER): token, ("hook_pos_embed", ANSWER): place,
        ("blocks.0.attn.hook_pattern", None): acts.pattern0.unsqueeze(1),
        ("blocks.0.attn.hook_pattern", ANSWER): acts.pattern0[:, -1].unsqueeze(1),
        ("blocks.0.hook_resid_mid", None): lambda: fastpath.resid_after_layer1(params, tokens, acts.pattern0),
        ("blocks.0.hook_resid_mid", ANSWER): after_layer1,
        ("blocks.0.attn.hook_result", ANSWER): head0.unsqueeze(1), ("blocks.0.hook_attn_out", ANSWER): head0,
        ("blocks.1.attn.hook_pattern", ANSWER): acts.pattern1_last.unsqueeze(1),
        ("blocks.1.attn.hook_result", ANSWER): head1.unsqueeze(1), ("blocks.1.hook_attn_out", ANSWER): head1,
        ("blocks.1.hook_resid_mid", ANSWER): acts.resid_mid1_last,
        ("blocks.1.mlp.hook_pre", ANSWER): acts.mlp_pre, ("blocks.1.mlp.hook_post", ANSWER): acts.mlp_post,
        ("blocks.1.hook_mlp_out", ANSWER): mlp_out,
        ("blocks.1.hook_resid_post", ANSWER): lambda: acts.resid_mid1_last + mlp_out(),
        ("logits", ANSWER): acts.logits,
    }


# :func:`_answer_tables`'s keys, and the hooks that name one of them (layer 1 has no MLP; no normalisation)
_TABLE_KEYS = frozenset({("hook_embed", ANSWER), ("hook_pos_embed", ANSWER), ("logits", ANSWER),
                         ("blocks.0.attn.hook_pattern", None), ("blocks.0.attn.hook_pattern", ANSWER),
                         ("blocks.0.hook_resid_mid", None), ("blocks.0.hook_resid_mid", ANSWER),
                         ("blocks.0.attn.hook_result", ANSWER), ("blocks.0.hook_attn_out", ANSWER),
                         ("blocks.1.attn.hook_pattern", ANSWER), ("blocks.1.attn.hook_result", ANSWER),
                         ("blocks.1.hook_attn_out", ANSWER), ("blocks.1.hook_resid_mid", ANSWER),
                         ("blocks.1.mlp.hook_pre", ANSWER), ("blocks.1.mlp.hook_post", ANSWER),
                         ("blocks.1.hook_mlp_out", ANSWER), ("blocks.1.hook_resid_post", ANSWER)})
_SAME = {"blocks.0.hook_resid_post": "blocks.0.hook_resid_mid", "blocks.1.hook_resid_pre": "blocks.0.hook_resid_mid",
         "blocks.1.mlp.hook_in": "blocks.1.hook_resid_mid"}
TABLE_SITES = _TABLE_KEYS | {(alias, position) for alias, hook in _SAME.items()
                             for named, position in _TABLE_KEYS if named == hook}
_HEAD_VECTORS = ("q", "k", "v", "z")  # (batch, pos, head, d_head): patched at a position and head
_HEADED = ("hook_pattern", "hook_result", "hook_z", "hook_q", "hook_k", "hook_v")


def _part(site: Site, act: torch.Tensor) -> tuple:
    """The index of the site's part of its hook's whole activation ``act`` (as ``run_with_cache`` keeps
    it: (B, H, query, key) for a pattern, (B, pos, H, ...) else): its position and head, every row."""
    pattern, index = site.hook.endswith("hook_pattern"), [slice(None)] * act.dim()
    if site.position is not None:
        index[2 if pattern else 1] = -1 if site.position == ANSWER else site.position
    if site.head is not None:
        index[1 if pattern else 2] = site.head
    return tuple(index)


def _select(site: Site, full: torch.Tensor) -> torch.Tensor:
    return full[_part(site, full)]


def _edit_at(site: Site, fn: Edit) -> Edit:
    """``fn`` applied to the site's part of its hook's activation, everything else left as it is."""
    if site.position is None and site.head is None:
        return fn

    def edit(act: torch.Tensor) -> torch.Tensor:
        out, part = act.clone(), _part(site, act)
        out[part] = fn(act[part])
        return out
    return edit


def _shape_kept(site: Site, fn: Edit) -> Edit:
    """``fn``, refusing in one line a result that is not a tensor of its input's shape: a batch of 1 would
    be broadcast over the batch, a wrong shape fail deep inside the forward."""
    def edit(act: torch.Tensor) -> torch.Tensor:
        out = fn(act)
        if not isinstance(out, torch.Tensor) or out.shape != act.shape:
            got = tuple(out.shape) if isinstance(out, torch.Tensor) else type(out).__name__
            raise ArgumentError(f"the edit of {site} returned {got} for an activation of shape {tuple(act.shape)}; "
                                f"return a tensor of the shape it was given (nothing is broadcast)")
        return out
    return edit


def _hook_edits(edits: Mapping | Iterable | None) -> tuple[list[Site], dict[str, Edit]]:
    """The edits' sites, and one function per hook (several edits of one hook applied in turn)."""
    if isinstance(edits, (str, Site)) or not (edits is None or isinstance(edits, (Mapping, Iterable))):
        raise ArgumentTypeError(f"edits: give {{Site or hook name: function}}, not {type(edits).__name__}")
    pairs = list(edits.items()) if isinstance(edits, Mapping) else list(edits or ())
    if not all(isinstance(pair, tuple) and len(pair) == 2 for pair in pairs):
        raise ArgumentTypeError("edits: give {Site or hook name: function} or (key, function) pairs")
    sites = [key if isinstance(key, Site) else Site(key) for key, _ in pairs]
    by_hook: dict[str, Edit] = {}
    for site, (_, fn) in zip(sites, pairs):
        if not callable(fn):
            raise ArgumentTypeError(f"edits: {site}'s edit is {type(fn).__name__}, not a function of the "
                                    f"activation (e.g. torch.zeros_like)")
        fn = _edit_at(site, _shape_kept(site, fn))
        before = by_hook.get(site.hook)
        by_hook[site.hook] = fn if before is None else (lambda a, b: lambda act: b(a(act)))(before, fn)
    return sites, by_hook


def _bridge_hooks(by_hook: dict[str, Edit]) -> list[tuple[str, Callable]]:
    """The edits as TransformerLens forward hooks (which are called with the hook point too)."""
    return [(name, (lambda fn: lambda act, hook=None: fn(act))(fn)) for name, fn in by_hook.items()]


def _table_edits(sites: list[Site]) -> bool:
    """Whether the tables make these edits: hooks they are arranged around, a layer-2 one at ``=``
    (the only place they compute it)."""
    return all(s.hook in fastpath.EDITABLE_HOOKS and (s.layer == 0 or s.position in (None, ANSWER)) for s in sites)


_PLAIN_ANY = ("hook_resid_pre", "attn.hook_pattern", "hook_attn_out", "hook_resid_mid")  # at every position
_PLAIN_LAST = ("mlp.hook_in", "mlp.hook_pre", "mlp.hook_post", "hook_mlp_out", "hook_resid_post")
_NOT_PLAIN_EDITS = ("attn.hook_pattern", "mlp.hook_pre", "mlp.hook_post")  # read there, not written back


def _plain_reads(site: Site, cfg: ModelConfig) -> bool:
    """Whether the last-position forward computes ``site``: every layer's residual stream and attention
    at every position, the MLPs of every layer but the last at every position, the last one's at
    ``=`` (it is computed there only), the embeddings and the logits at ``=``."""
    if site.hook in ("hook_embed", "hook_pos_embed", "logits"):
        return site.position == ANSWER or site.hook != "logits"
    layer, name = site.layer, site.hook.split(".", 2)[-1]
    if layer is None or name not in _PLAIN_ANY + _PLAIN_LAST or "mlp" in name and layer not in cfg.mlp_blocks:
        return False  # a block without an MLP has its zero weights on the bridge only
    return name in _PLAIN_ANY or layer < cfg.n_layers - 1 or site.position == ANSWER


def _check_hook_names(bridge, names: set[str]) -> None:
    """Refuse, in one line, a hook the bridge does not have (a typo, or a block the model lacks)."""
    unknown = sorted(names - set(bridge.hook_dict))
    if unknown:
        raise ArgumentError(f"no hook {unknown[0]!r} in this model; its hooks are TransformerLens's, e.g. "
                            f"blocks.0.hook_resid_pre, blocks.0.attn.hook_pattern, blocks.0.hook_mlp_out "
                            f"(and blocks.L.attn.hook_result, each head's write)")


class Forward:
    """The one forward of a model (``model``: a bridge or :class:`~compose_lens.model.tl.Weights`;
    ``fast``: None takes the tables where they are exact, True insists (refusing what they cannot
    compute), False never). See the module doc."""

    def __init__(self, model: "tl.Model | tl.Weights", cfg: ModelConfig, fast: bool | None = None):
        self.model, self.cfg = model, cfg
        self.tables = weights.use_table_forward(cfg, fast)
        self.insist = fast is True  # the tables or a refusal, never the bridge
        self.plain = fast is not False and capabilities.supports(cfg, "lastpos")  # no normalisation
        self.engine = fast is not False and capabilities.supports(cfg, "patching")  # model/patch_engine.py
        self._bridge = None if isinstance(model, tl.Weights) else model

    @property
    def params(self) -> dict[str, torch.Tensor]:
        return tl.parameters(self.model)

    @property
    def device(self) -> torch.device:
        return self.params["embed.weight"].device

    def bridge(self):
        """The TransformerLens bridge (booted from the weights once, if the model is only weights)."""
        if self._bridge is None:
            self._bridge = tl.bridge_of(self.model)
        return self._bridge

    def _refuse_if_insisted(self, what: str) -> None:
        if self.insist:
            raise ComposeLensError(f"the table forward cannot {what} (it reads {len(TABLE_SITES)} sites and edits "
                                   f"{', '.join(fastpath.EDITABLE_HOOKS)}): leave fast unset to use the bridge")

    def on_tables(self, sites: Iterable[Site]) -> bool:
        """Whether the tables answer every site (else the bridge does)."""
        return self.tables and all((s.hook, s.position) in TABLE_SITES and s.head in (None, 0) for s in sites)

    @torch.no_grad()
    def read(self, tokens: torch.Tensor, sites: Iterable[Site], chunk: int = 4096,
             edits: Edits | None = None) -> dict[Site, torch.Tensor]:
        """{site: activation} of ``tokens`` (N, n), float32 on CPU, in chunks of ``chunk`` sequences.
        ``Site("logits", "=")`` is the answer logits. ``edits`` (as :meth:`edited_logits` takes them):
        read with those activations replaced (by the last-position forward or the bridge)."""
        check_tokens(tokens, self.cfg.d_vocab, self.cfg.n_ctx)
        sites, chunk = list(dict.fromkeys(_check_sites(sites, self.cfg, tokens.shape[1]))), max(1, chunk)
        edit_sites, edits = _hook_edits(edits)
        _check_sites(edit_sites, self.cfg, tokens.shape[1], "edits")
        parts = [self._read(tokens[start: start + chunk].to(self.device), sites, edits, edit_sites)
                 for start in range(0, len(tokens), chunk)]
        return {site: torch.cat([p[site] for p in parts]) for site in sites}

    def _read(self, tokens: torch.Tensor, sites: list[Site], edits: dict[str, Edit], edit_sites: list[Site]
              ) -> dict[Site, torch.Tensor]:
        for site in sites:
            if site.head is not None and not site.hook.endswith(_HEADED):
                raise ComposeLensError(f"site {site}: {site.hook} has no head axis; leave the head out")
        if edits or not self.on_tables(sites):
            self._refuse_if_insisted(f"read {', '.join(str(s) for s in sites if (s.hook, s.position) not in TABLE_SITES)}"
                                     if not edits else "read under edits")
            if self.plain and all(_plain_reads(s, self.cfg) for s in sites) and \
                    all(_plain_reads(s if s.position is not None else s.at(ANSWER), self.cfg)
                        and not s.hook.endswith(_NOT_PLAIN_EDITS) for s in edit_sites):
                return self._read_plain(tokens, sites, edits)
            return self._read_hooks(tokens, sites, edits)
        params = {k: v.float() for k, v in self.params.items()}
        found = _answer_tables(params, self.cfg, tokens)
        out = {}
        for site in sites:
            value = found[(_SAME.get(site.hook, site.hook), site.position)]
            value = value() if callable(value) else value
            out[site] = (value if site.head is None else value.select(1, site.head)).detach().float().cpu()
        return out

    def _read_plain(self, tokens: torch.Tensor, sites: list[Site], edits: dict[str, Edit]) -> dict[Site, torch.Tensor]:
        """The sites from :mod:`compose_lens.model.lastpos`'s plain-torch layers (no hooks): every layer
        at every position, the last layer's MLP at ``=`` only (see :func:`_plain_reads`), and its attention
        at ``=`` only too where every read of it is there and nothing is edited."""
        found: dict[str, torch.Tensor] = {}

        def keep(name: str, value: torch.Tensor) -> torch.Tensor:
            found[name] = value = edits[name](value) if name in edits else value
            return value

        params = weights.detached_parameters(self.model)
        last = f"blocks.{self.cfg.n_layers - 1}."  # its attention at every query only where a read or an edit needs it
        every_query = bool(edits) or any(s.hook.startswith(last) and s.position != ANSWER and s.hook.endswith(
            ("attn.hook_pattern", "hook_attn_out", "hook_resid_mid")) for s in sites)
        found["logits"] = lastpos.last_position_logits(params, self.cfg, tokens.cpu(), keep, every_query).unsqueeze(1)
        return {site: _select(site, found[site.hook]).detach().float() for site in sites}

    def _read_hooks(self, tokens: torch.Tensor, sites: list[Site], edits: dict[str, Edit] | None = None
                    ) -> dict[Site, torch.Tensor]:
        def source(hook: str) -> str:
            return hook.replace("hook_result", "hook_z")

        names = {source(s.hook) for s in sites if s.hook != "logits"}
        _check_hook_names(self.bridge(), names | set(edits or {}))
        with tl.hooks(self.bridge(), _bridge_hooks(edits or {})):
            logits, cache = tl.run_with_cache(self.bridge(), tokens, names_filter=lambda name: name in names)
        out = {}
        for site in sites:
            if site.hook == "logits":
                value = _select(site, logits)
            elif site.hook.endswith("hook_result"):  # the position first: each head's write where it is read
                z = _select(replace(site, head=None), cache[source(site.hook)])
                value = self._head_writes(site.layer, z)
                value = value if site.head is None else value.select(-2, site.head)
            else:
                value = _select(site, cache[site.hook])
            out[site] = value.detach().float().cpu()
        return out

    def _head_writes(self, layer: int, z: torch.Tensor) -> torch.Tensor:
        """(..., H, d_model): each head's ``hook_z`` (..., H, d_head) through its slice of ``W_O`` (no bias)."""
        w_o, d_head = self.params[f"blocks.{layer}.attn.o.weight"], self.cfg.d_head
        return torch.stack([z[..., h, :] @ w_o[:, h * d_head:(h + 1) * d_head].T for h in range(z.shape[-2])], dim=-2)

    @property
    def kind(self) -> str:
        """Which forward computes the answer: ``"tables"``, ``"lastpos"`` or ``"transformerlens"`` (``fast``
        None: as :func:`compose_lens.core.capabilities.answer_forward` chooses; True: the tables, unrefused)."""
        return "tables" if self.tables else "lastpos" if self.plain else "transformerlens"

    def answer_forward(self) -> Callable[[torch.Tensor], torch.Tensor]:
        """``tokens -> logits`` (N, d_vocab_out) at ``=`` by :attr:`kind`, over the live parameters, with
        their gradients: what the trainer steps and the evaluations read."""
        params, cfg, answer = self.params, self.cfg, ANSWERS.get(self.kind)
        if answer is not None:
            return lambda tokens: answer(params, cfg, tokens)
        if self._bridge is None:
            raise ValueError("the TransformerLens forward needs a booted model, not tl.Weights")
        return lambda tokens: self._bridge(tokens)[:, -1]

    @torch.no_grad()
    def logits(self, tokens: torch.Tensor) -> torch.Tensor:
        """(N, d_vocab_out) the answer logits at ``=`` (the fastest exact forward)."""
        check_tokens(tokens, self.cfg.d_vocab, self.cfg.n_ctx)
        if self.kind == "transformerlens":
            self.bridge()  # booted from the weights where need be
        return self.answer_forward()(tokens.to(self.device))

    @torch.no_grad()
    def logits_from(self, site: Site, resid: torch.Tensor) -> torch.Tensor:
        """(N, d_vocab_out) answer logits with the residual stream at ``site`` (the last block's
        ``hook_resid_mid``, ``mlp.hook_in`` or ``hook_resid_post`` at ``=``) set to ``resid`` (N, d_model)
        and the model run on from there (plain torch, float32 on CPU; models without normalisation)."""
        last = self.cfg.n_layers - 1
        through_mlp = {f"blocks.{last}.hook_resid_mid": True, f"blocks.{last}.mlp.hook_in": True,
                       f"blocks.{last}.hook_resid_post": False}.get(site.hook)
        if through_mlp is None or site.position != ANSWER or not capabilities.supports(self.cfg, "lastpos"):
            raise ComposeLensError(f"site {site}: a model without normalisation runs on from the last block's "
                                   f"residual stream at '=' (blocks.{last}.hook_resid_mid@=, blocks.{last}.hook_resid_post@=)")
        params = weights.detached_parameters(self.model)
        if through_mlp and last in self.cfg.mlp_blocks:
            return weights.mlp_readout(params, self.cfg, resid, last)[2]
        return weights.unembed(params, self.cfg, resid)

    @torch.no_grad()
    def mlp_from(self, layer: int, h: torch.Tensor) -> torch.Tensor:
        """(N, d_model) the output of ``blocks.{layer}``'s MLP with its input at ``=`` set to ``h`` (N, d_model)
        (plain torch, float32 on CPU; same-MLP's router isolation reads the adder so)."""
        return weights.mlp_out(weights.detached_parameters(self.model), self.cfg, h, layer)[2]

    def lens(self, resid: torch.Tensor) -> torch.Tensor:
        """(N, d_vocab_out) a partial residual stream at ``=`` (N, d_model) read as the model reads its last
        one: through the final normalisation (its scale from ``resid`` itself) and the unembedding."""
        kind = self.cfg.normalization_type
        if kind is not None:
            params = tl.parameters(self.model)
            weight, bias = (None if params.get(f"ln_final.{n}") is None else params[f"ln_final.{n}"].detach()
                            for n in ("weight", "bias"))
            eps = getattr(getattr(self.model, "cfg", None), "eps", 1e-5)
            if kind.startswith("LN"):
                resid = torch.nn.functional.layer_norm(resid, resid.shape[-1:], weight, bias, eps)
            else:
                resid = resid * torch.rsqrt(resid.pow(2).mean(-1, keepdim=True) + eps)
                resid = resid if weight is None else resid * weight
        return weights.unembed(weights.detached_parameters(self.model), self.cfg, resid)

    @torch.no_grad()
    def edited_logits(self, tokens: torch.Tensor, edits: Edits, chunk: int = 1024) -> torch.Tensor:
        """(N, d_vocab_out) answer logits with each edit's ``function(activation)`` written in place of what
        it names: a hook (its whole activation) or a :class:`Site` (that position and head only); ``edits``
        is a mapping or (key, function) pairs, several edits of one hook applied in turn. In chunks of
        ``chunk`` (1,024 keep the tables' tensors in cache: 2x faster than 4,096). The tables make the edits
        of :data:`~compose_lens.model.fastpath.EDITABLE_HOOKS` (a layer-2 one at ``=`` only), the bridge any
        other."""
        check_tokens(tokens, self.cfg.d_vocab, self.cfg.n_ctx)
        sites, by_hook = _hook_edits(edits)
        _check_sites(sites, self.cfg, tokens.shape[1], "edits")
        out = []
        if self.tables and _table_edits(sites):
            params = {name: value.float() for name, value in self.params.items()}
            for start in range(0, len(tokens), chunk):
                out.append(fastpath.edited_answer_logits(params, self.cfg, tokens[start: start + chunk], by_hook))
            return torch.cat(out)
        self._refuse_if_insisted(f"edit {', '.join(str(s) for s in sites if not _table_edits([s]))}")
        model = self.bridge()
        _check_hook_names(model, set(by_hook))
        with tl.hooks(model, _bridge_hooks(by_hook)):
            for start in range(0, len(tokens), chunk):
                out.append(model(tokens[start: start + chunk].to(self.device))[:, -1].float())
        return torch.cat(out)

    @torch.no_grad()
    def patched(self, clean: torch.Tensor, corrupted: torch.Tensor, sites: list[Site],
                measure: patch_engine.Measure, chunk: int = 128, max_rows: int = 8192) -> torch.Tensor:
        """Activation patching: (S, N) ``measure(logits, rows)`` of the corrupted prompts (N, n) with each
        site alone written from the clean prompts at its position and head. ``measure`` maps answer logits
        (R, d_vocab_out) of the prompts ``rows`` (R,) (indices into the N) to (R,) values. The engine of
        :mod:`compose_lens.model.patch_engine` takes the components it is exact for (``chunk`` prompts at
        a time); else the bridge's hooks, one forward of at most ``max_rows`` (site, prompt) rows per
        (component, layer), row r the clean activation of prompt ``r % N`` at site ``r // N``."""
        N = len(clean)
        if self.engine and all(s.component in patch_engine.COMPONENTS for s in sites):
            W = patch_engine.Engine(self.model, self.cfg)
            return torch.cat([patch_engine.patched_values(W, clean[start: start + chunk], corrupted[start: start + chunk],
                                                          sites, measure, torch.arange(start, min(start + chunk, N)))
                              for start in range(0, N, chunk)], dim=1)
        model, out = self.bridge(), torch.empty(len(sites), N)
        groups: dict[tuple[str, int], list[int]] = {}
        for j, s in enumerate(sites):
            groups.setdefault((s.component, s.layer), []).append(j)
        names = {tl.hook_name(c, layer) for c, layer in groups}
        _, cache = tl.run_with_cache(model, clean, names_filter=lambda name: name in names)
        per_forward = max(1, max_rows // N)
        for (component, layer), members in groups.items():
            clean_act = cache[tl.hook_name(component, layer)]
            for start in range(0, len(members), per_forward):
                part = members[start: start + per_forward]
                positions = torch.tensor([sites[j].position for j in part]).repeat_interleave(N)
                heads = torch.tensor([-1 if sites[j].head is None else sites[j].head for j in part]).repeat_interleave(N)
                prompt = torch.arange(N).repeat(len(part))
                rows = torch.arange(len(part) * N)

                def write_clean(act, hook, positions=positions, heads=heads, prompt=prompt, rows=rows):
                    # in place, as transformer_lens.patching does: some bridge hooks are
                    # aliases whose returned tensor does not reach every reader
                    if component == "pattern":  # (batch, head, dest, src): the head's row at dest
                        act[rows, heads, positions] = clean_act[prompt, heads, positions]
                    elif component in _HEAD_VECTORS:
                        act[rows, positions, heads] = clean_act[prompt, positions, heads]
                    else:
                        act[rows, positions] = clean_act[prompt, positions]
                    return act

                logits = tl.run_with_hooks(model, corrupted.repeat(len(part), 1),
                                           [(tl.hook_name(component, layer), write_clean)])
                last = logits[:, -1].float().view(len(part), N, -1)
                out[part] = torch.stack([measure(site_logits, torch.arange(N)) for site_logits in last])
        return out

    @torch.no_grad()
    def path_patched(self, clean: torch.Tensor, corrupted: torch.Tensor, sender: Site, receivers: list[Site],
                     measure: patch_engine.Measure, chunk: int = 512) -> tuple[torch.Tensor, torch.Tensor]:
        """Path patching, clean into corrupted, by the two steps of Wang et al. (2022) on the bridge's hooks:
        (R, N) ``measure`` (as :meth:`patched` takes it) with only the path from ``sender`` (its hook at every
        position: a head's ``hook_z``, an MLP's ``hook_mlp_out``) to each receiver (an input at every
        position: a head's ``hook_q`` / ``hook_k`` / ``hook_v``, an MLP's ``mlp.hook_pre``) patched, and (N,)
        with the sender patched alone, ``chunk`` prompts at a time:

        1. run the corrupted prompts with the sender's output taken from the clean run and every attention
           head after the sender's block frozen at its corrupted output, so the sender's change reaches the
           receivers directly (and through the MLPs in between, which recompute, as in Wang et al.); record
           each receiver's input there;
        2. run the corrupted prompts with only that receiver's recorded input written in, everything
           downstream of it recomputed, and read ``measure`` at ``=``.
        """
        model, N = self.bridge(), len(clean)
        frozen = sorted(tl.hook_name("z", layer) for layer in range(sender.layer + 1, self.cfg.n_layers))
        reads = sorted({r.hook for r in receivers})
        paths, totals = [], []
        for start in range(0, N, chunk):
            rows, corrupt_part = torch.arange(start, min(start + chunk, N)), corrupted[start: start + chunk]
            _, from_clean = tl.run_with_cache(model, clean[start: start + chunk], names_filter=lambda n: n == sender.hook)
            _, corrupt = tl.run_with_cache(model, corrupt_part, names_filter=lambda n: n in frozen)

            # in place (see patched); hook.name is not always the name hooked (the bridge's hook_z is an alias)
            def write(act, hook, site: Site, source: dict[str, torch.Tensor]):
                act[_part(site, act)] = source[site.hook][_part(site, act)]
                return act

            recorded: dict[str, torch.Tensor] = {}

            def record(act, hook, name):
                recorded[name] = act.detach().clone()
                return act

            send = (sender.hook, functools.partial(write, site=sender, source=from_clean))
            tl.run_with_hooks(model, corrupt_part, [send, *((name, functools.partial(write, site=Site(name), source=corrupt))
                                                            for name in frozen),
                                                    *((name, functools.partial(record, name=name)) for name in reads)])

            def values(hooks: list) -> torch.Tensor:
                return measure(tl.run_with_hooks(model, corrupt_part, hooks)[:, -1].float(), rows)

            row = [values([(r.hook, functools.partial(write, site=r, source=recorded))]) for r in receivers]
            paths.append(torch.stack(row) if row else torch.empty(0, len(rows)))
            totals.append(values([send]))
        return torch.cat(paths, dim=1), torch.cat(totals)
