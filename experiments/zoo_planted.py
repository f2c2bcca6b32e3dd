"""Planted models for the verdict zoo: the paper model's weights rearranged so that the answer to a
verdict's question is known by construction (experiments/zoo.py scores every verdict on them).

Each builder takes the paper model (a :class:`compose_lens.training.subject.Subject`) and returns a new
subject of the same task and split, with weights set by hand, nothing trained:

* :func:`decoy_heads`: two heads per layer. The binder and the router move to head 1 of their
  layers; head 0 of each layer is a **decoy** with the real head's queries and keys (the same
  attention pattern, so the same attention score) and no output (its values zero). The function
  is the paper's. Truth: binder ``blocks.0 head 1``, router ``blocks.1 head 1``, adder
  ``blocks.1.mlp``; a locator that reads attention alone cannot tell the decoy from the role.
* :func:`orthogonal_subspaces`: constants and variables reach the adder in orthogonal subspaces
  of a wider residual stream, the same function (the same-MLP tests' first planted negative,
  moved here from the same-MLP tests' test_same_mlp.py). Truth: not the same representation.
* :func:`gated_adders`: **two adders**, one for constants and one for variables. A third block is
  added; a new layer-1 head at ``=`` counts the variable tokens among the two operands, the
  layer-1 MLP turns that count into a gate (1 where any operand is a variable), and the paper's
  MLP2 is copied into ``blocks.1.mlp`` (killed by the gate: it adds constants only) and into
  ``blocks.2.mlp`` (killed by its absence: it adds whenever a variable is an operand). The
  function is the paper's; no one MLP adds both. ``constants_first=False`` swaps the two blocks.
* :func:`no_binder`: the binder's output zeroed (``"zero"``) or replaced by a random map of its
  size (``"random"``): no value position learns its variable, so nothing in a 2-layer model can
  bind, whatever the layer-2 head attends to. Truth: no binder, no router.
* :func:`random_init`: the study's initialisation, untrained.

Every builder returns ``(subject, truth)``: ``truth`` as experiments/zoo.py's index records it.
:func:`build` calls one by its name and its arguments as the index writes them.
"""

from __future__ import annotations

import dataclasses

import torch

from compose_lens.model import tl
from compose_lens.training.subject import Subject

NONE = "none"


def _truth(binds: bool, binder: str = NONE, router: str = NONE, adder: str | None = None, same_mlp: str = "untestable",
           modular: str = "untestable", source: str = "construction") -> dict:
    """The index's truth columns; ``adder`` None: read from the answers (experiments/zoo.py ``truth_of``:
    the one MLP where the model computes the operation, else none)."""
    truth = {"truth_binds": binds, "truth_binder": binder, "truth_router": router,
             "truth_same_mlp": same_mlp, "truth_modular": modular, "truth_source": source}
    return truth if adder is None else {**truth, "truth_adder": adder}


def _weights(subject: Subject) -> dict[str, torch.Tensor]:
    return {k: v.detach().float().clone() for k, v in tl.parameters(subject.model).items()}


def _subject(base: Subject, cfg, weights: dict[str, torch.Tensor], source: str) -> Subject:
    model = tl.boot(cfg)
    tl.load_state(model, weights)
    config = dataclasses.replace(base.config, model=cfg)
    return Subject(model.eval(), config, base.split, source)


def decoy_heads(paper: Subject) -> tuple[Subject, dict]:
    src, cfg = _weights(paper), paper.config.model
    d = cfg.d_head
    new = cfg.replace(n_heads=2)
    model = tl.boot(new)
    W = {k: torch.zeros_like(v) for k, v in tl.parameters(model).items()}
    for name in ("embed.weight", "pos_embed.weight", "unembed.weight", "blocks.1.mlp.in.weight",
                 "blocks.1.mlp.out.weight"):
        W[name] = src[name].clone()
    real, decoy = slice(d, 2 * d), slice(0, d)
    for layer in (0, 1):
        for kind in ("q", "k"):
            weight = src[f"blocks.{layer}.attn.{kind}.weight"]
            W[f"blocks.{layer}.attn.{kind}.weight"][real] = weight
            W[f"blocks.{layer}.attn.{kind}.weight"][decoy] = weight  # the same pattern, no output
        W[f"blocks.{layer}.attn.v.weight"][real] = src[f"blocks.{layer}.attn.v.weight"]
        W[f"blocks.{layer}.attn.o.weight"][:, real] = src[f"blocks.{layer}.attn.o.weight"]
    subject = _subject(paper, new, W, "planted: decoy_heads(paper)")
    return subject, _truth(True, "blocks.0 head 1", "blocks.1 head 1", "blocks.1.mlp", "yes", "yes",
                           "construction (roles and decoys); the same-MLP and modularity answers are the "
                           "paper model's, whose function and MLP this is")


def orthogonal_subspaces(paper: Subject, beta: float = 30.0) -> tuple[Subject, dict]:
    """The paper model rebuilt so that constants and variables reach MLP2 in ORTHOGONAL subspaces,
    computing the same function (so accuracy cannot give it away).

    Residual width 3d + n: block A (the original), block B (raw number embeddings), block C,
    and a one-hot position. Layer 1 has a second head that, at every context position, attends
    to itself and MOVES a number from B into A (writes +e into A, -e into B); at the operand
    slots it attends to the operator (nothing to move), so a constant stays in B. Every original
    reader (both layers' queries and keys, layer 1's values) reads A + B, so all attention
    patterns are the study's. Layer 2 keeps its head for A (a variable's value, fetched from
    the context) and gets a twin head with the same pattern that reads B (a constant, fetched
    from its slot) and writes into C. MLP2 and the unembedding read A + C. The function is
    unchanged; a variable's value arrives in A, a constant in C.
    """
    src, cfg, task = _weights(paper), paper.config.model, paper.config.task
    d, n, p = cfg.d_model, cfg.n_ctx, task.modulus
    A, B, C, Pd = slice(0, d), slice(d, 2 * d), slice(2 * d, 3 * d), slice(3 * d, 3 * d + n)
    new = cfg.replace(d_model=3 * d + n, n_heads=2, d_head=d)
    model = tl.boot(new)
    W = {k: torch.zeros_like(v) for k, v in tl.parameters(model).items()}
    W["embed.weight"][:, A] = src["embed.weight"]
    W["embed.weight"][:p, B], W["embed.weight"][:p, A] = src["embed.weight"][:p], 0.0
    W["pos_embed.weight"][:, A], W["pos_embed.weight"][:, Pd] = src["pos_embed.weight"][:n], torch.eye(n)
    h0, h1 = slice(0, d), slice(d, 2 * d)
    for layer in (0, 1):
        for kind in ("q", "k"):
            for block in (A, B):
                W[f"blocks.{layer}.attn.{kind}.weight"][h0, block] = src[f"blocks.{layer}.attn.{kind}.weight"]
        W[f"blocks.{layer}.attn.o.weight"][A, h0] = src[f"blocks.{layer}.attn.o.weight"]
    for block in (A, B):
        W["blocks.0.attn.v.weight"][h0, block] = src["blocks.0.attn.v.weight"]
        W["blocks.1.attn.q.weight"][h1, block] = src["blocks.1.attn.q.weight"]  # the twin: same pattern
        W["blocks.1.attn.k.weight"][h1, block] = src["blocks.1.attn.k.weight"]
    # layer 1, head 1: self at every position but the operand slots, which look at the operator
    target = torch.arange(n)
    target[n - 3: n - 1] = n - 4
    W["blocks.0.attn.q.weight"][d: d + n, Pd] = torch.eye(n)
    W["blocks.0.attn.k.weight"][d: d + n, Pd] = beta * d ** 0.5 * torch.nn.functional.one_hot(target, n).float()
    W["blocks.0.attn.v.weight"][h1, B] = torch.eye(d)
    W["blocks.0.attn.o.weight"][A, h1], W["blocks.0.attn.o.weight"][B, h1] = torch.eye(d), -torch.eye(d)
    # layer 2: head 0 reads values from A only; the twin reads B and writes C
    W["blocks.1.attn.v.weight"][h0, A] = src["blocks.1.attn.v.weight"]
    W["blocks.1.attn.v.weight"][h1, B] = src["blocks.1.attn.v.weight"]
    W["blocks.1.attn.o.weight"][C, h1] = src["blocks.1.attn.o.weight"]
    for block in (A, C):
        W["blocks.1.mlp.in.weight"][:, block] = src["blocks.1.mlp.in.weight"]
        W["unembed.weight"][:, block] = src["unembed.weight"]
    W["blocks.1.mlp.out.weight"][A] = src["blocks.1.mlp.out.weight"]
    subject = _subject(paper, new, W, f"planted: orthogonal_subspaces(paper, beta={beta})")
    return subject, _truth(True, "blocks.0 head 0", "blocks.1 head 0", "blocks.1.mlp", "no", "no",
                           "construction (variables reach the adder in another subspace than constants); the "
                           "roles are the paper's heads, though the twin head and the mover share them")


GATE_K = 1000.0  # the gate's pull on a killed MLP's neurons: far beyond any pre-activation of MLP2


def gated_adders(paper: Subject, constants_first: bool = True) -> tuple[Subject, dict]:
    src, cfg, task = _weights(paper), paper.config.model, paper.config.task
    d, n = cfg.d_model, cfg.n_ctx
    # extra residual dimensions: a variable token's tag, a constant 1, the operand slots' positions,
    # the gathered count of variable operands and the gate
    VAR, ONE, S1, S2, COUNT, GATE = range(d, d + 6)
    new = cfg.replace(d_model=d + 6, n_layers=3, n_heads=2, mlp_blocks=(0, 1, 2))
    model = tl.boot(new)
    W = {k: torch.zeros_like(v) for k, v in tl.parameters(model).items()}
    old = slice(0, d)
    W["embed.weight"][:, old] = src["embed.weight"]
    W["embed.weight"][task.first_var_token: task.first_var_token + task.n_vars, VAR] = 1.0
    W["pos_embed.weight"][:, old] = src["pos_embed.weight"][:n]
    W["pos_embed.weight"][:, ONE] = 1.0
    W["pos_embed.weight"][n - 3, S1] = W["pos_embed.weight"][n - 2, S2] = 1.0
    W["unembed.weight"][:, old] = src["unembed.weight"]
    h0, h1 = slice(0, cfg.d_head), slice(cfg.d_head, 2 * cfg.d_head)
    for layer in (0, 1):  # the paper's heads, as head 0, on the paper's dimensions
        for kind in ("q", "k", "v"):
            W[f"blocks.{layer}.attn.{kind}.weight"][h0, old] = src[f"blocks.{layer}.attn.{kind}.weight"]
        W[f"blocks.{layer}.attn.o.weight"][old, h0] = src[f"blocks.{layer}.attn.o.weight"]
    # layer 1, head 1: every position attends to the two operand slots (where it can see them) and
    # counts their variable tags: COUNT = (is_var(left) + is_var(right)) / 2 at "="
    beta = 50.0 * cfg.d_head ** 0.5
    first = cfg.d_head
    W["blocks.0.attn.q.weight"][first, ONE] = beta
    W["blocks.0.attn.k.weight"][first, S1] = W["blocks.0.attn.k.weight"][first, S2] = 1.0
    W["blocks.0.attn.v.weight"][first, VAR] = 1.0
    W["blocks.0.attn.o.weight"][COUNT, first] = 1.0
    # layer-1 MLP: GATE = min(1, 2 COUNT) = relu(2 COUNT) - relu(2 COUNT - 1)
    W["blocks.0.mlp.in.weight"][0, COUNT], W["blocks.0.mlp.in.weight"][1, COUNT] = 2.0, 2.0
    W["blocks.0.mlp.in.weight"][1, ONE] = -1.0
    W["blocks.0.mlp.out.weight"][GATE, 0], W["blocks.0.mlp.out.weight"][GATE, 1] = 1.0, -1.0
    constants, variables = (1, 2) if constants_first else (2, 1)
    for block in (constants, variables):
        W[f"blocks.{block}.mlp.in.weight"][:, old] = src["blocks.1.mlp.in.weight"]
        W[f"blocks.{block}.mlp.out.weight"][old] = src["blocks.1.mlp.out.weight"]
    W[f"blocks.{constants}.mlp.in.weight"][:, GATE] = -GATE_K  # dead once any operand is a variable
    W[f"blocks.{variables}.mlp.in.weight"][:, GATE] = GATE_K  # dead when both are constants
    W[f"blocks.{variables}.mlp.in.weight"][:, ONE] = -GATE_K
    name = f"planted: gated_adders(paper, constants_first={constants_first})"
    subject = _subject(paper, new, W, name)
    return subject, _truth(True, "blocks.0 head 0", "blocks.1 head 0", f"blocks.{constants}.mlp", "no", "no",
                           f"construction (constants added by blocks.{constants}.mlp, variables by "
                           f"blocks.{variables}.mlp); the adder role is the MLP that adds constants, the "
                           f"constant-operand grid being where the locator scores it")


def no_binder(paper: Subject, mode: str = "zero", seed: int = 0) -> tuple[Subject, dict]:
    W, cfg = _weights(paper), paper.config.model
    if mode == "zero":
        W["blocks.0.attn.v.weight"].zero_()
    else:
        g = torch.Generator().manual_seed(seed)
        v = W["blocks.0.attn.v.weight"]
        W["blocks.0.attn.v.weight"] = torch.randn(v.shape, generator=g) * v.std()
    subject = _subject(paper, cfg, W, f"planted: no_binder(paper, mode={mode!r})")
    return subject, _truth(False, source="construction (no layer-1 output reaches a value position, so no value "
                                         "is tagged with its variable and no 2-layer model can bind); the adder "
                                         "from the answers")


def random_init(paper: Subject, seed: int) -> tuple[Subject, dict]:
    cfg = paper.config.model.replace(init_seed=seed)
    model = tl.boot(cfg).eval()
    subject = Subject(model, dataclasses.replace(paper.config, model=cfg), paper.split, f"random init, seed {seed}")
    return subject, _truth(False, adder=NONE, source="construction (untrained: nothing learned)")


def build(name: str, paper: Subject, *args: str) -> tuple[Subject, dict]:
    """The builder ``name`` with its arguments as experiments/zoo.py writes them (strings):
    ``random_init SEED``, ``gated_adders constants_first|variables_first``, ``no_binder zero|random``."""
    if name == "random_init":
        return random_init(paper, int(args[0]))
    if name == "gated_adders":
        return gated_adders(paper, constants_first=args[0] == "constants_first")
    if name == "no_binder":
        return no_binder(paper, args[0])
    return {"decoy_heads": decoy_heads, "orthogonal_subspaces": orthogonal_subspaces}[name](paper)
