"""Which architectures each analysis command covers, decided from the config alone (no torch).

A command that cannot read a model says so in one line before it loads anything (torch included):

===========  ==============================================================================
command      covers
===========  ==============================================================================
``patch``    any model (every layer, head and MLP is patched through the hooks)
``ablate``   any model (neuron and Fourier-direction ablations of the located adder MLP,
             none where no MLP adds: :func:`compose_lens.registry.ablation.ablations.neuron_subject`)
``circuit``  any model (the edge graph normalises each receiver's input as the model does);
             edges scored against the located circuit, none where a role is not located
             (:func:`compose_lens.registry.circuit.discovery.circuit_labels`)
``dla``      any model (with a final norm, its scale held at the value the model computed:
             :mod:`compose_lens.registry.dla.attribution`)
``same-mlp`` any model with an MLP: the tests read the located adder MLP and router head
             (:mod:`compose_lens.registry.same_mlp.comparisons`, "Other architectures"); a model where no
             MLP adds or no head routes, or with normalisation (:func:`same_mlp_inconclusive`:
             its adder's input is not a sum of operand terms), gets the verdict
             ``inconclusive`` with why, decided once the model is loaded
``analyze``  the same as ``same-mlp`` (it runs the same-MLP tests)
``fourier``  a model with at least one MLP; the MLP analysed is the located adder, in any
             block (before the last block read through its direct path,
             :class:`compose_lens.analysis.fourier.FrozenDownstreamReadout`)
``report``   what ``same-mlp`` and ``fourier`` cover (its sections run them): a model with an MLP
``llc``      a model without normalisation (it samples the last-position forward)
===========  ==============================================================================

The analyses of a training run (``dynamics``, ``early-jump``, ``llc``) read checkpoints: a compose-lens
run or a folder of the study's ``step_N.pth``, not a model trained elsewhere (one model, no checkpoints).
"""

from __future__ import annotations

from pathlib import Path

from compose_lens.core.config import ModelConfig, RunConfig
from compose_lens.core.files import load_json

PAPER_MODEL_DIR = Path(__file__).resolve().parents[1] / "assets" / "paper"  # the shipped paper model (package data)


def _no_mlp(cfg: ModelConfig, reader: str) -> str | None:
    return None if cfg.mlp_blocks else f"the model has no MLP (mlp_blocks=[]): no MLP adds, {reader} nothing to read"


def same_mlp_problem(cfg: ModelConfig) -> str | None:
    return _no_mlp(cfg, "the same-MLP tests have")


def same_mlp_inconclusive(cfg: ModelConfig) -> str | None:
    """Why the same-MLP tests cannot decide on a model they read (its verdict is then ``inconclusive``), or
    None: under normalisation the adder's input is not a sum of the operands' terms, which the interchange
    and transfer tests swap."""
    if cfg.normalization_type is not None:
        norm = "LayerNorm" if cfg.normalization_type.startswith("LN") else "RMSNorm"
        return (f"the adder's input is not a sum of operand terms under {norm} "
                f"(normalization_type={cfg.normalization_type!r})")
    return None


def fourier_problem(cfg: ModelConfig) -> str | None:
    return _no_mlp(cfg, "the Fourier analysis has")


def report_problem(cfg: ModelConfig) -> str | None:
    reason = fourier_problem(cfg) or same_mlp_problem(cfg)
    return None if reason is None else f"its same-MLP and Fourier sections cannot read it: {reason}"


PROBLEMS = {
    "same-mlp": same_mlp_problem,
    "analyze": same_mlp_problem,
    "fourier": fourier_problem,
    "report": report_problem,
}


def problem(command: str, cfg: ModelConfig) -> str | None:
    """Why ``command`` does not cover a model of ``cfg`` (one line), or None where it does (a command not
    in :data:`PROBLEMS` covers every architecture its analysis's forwards run)."""
    return PROBLEMS.get(command, lambda cfg: None)(cfg)


def describe(cfg: ModelConfig) -> str:
    norm = "" if cfg.normalization_type is None else f", {cfg.normalization_type}"
    heads = f"{cfg.n_heads} head{'s' if cfg.n_heads != 1 else ''}"
    return f"{cfg.n_layers} layers x {heads}, MLPs in {list(cfg.mlp_blocks)}{norm}"


def peek_run_config(spec: str | Path) -> RunConfig | None:
    """The run config of what a MODEL argument names, from its ``config.json`` alone (no torch, no weights),
    so a guard can refuse before the model is loaded; None where it cannot be read so."""
    path = PAPER_MODEL_DIR if str(spec) == "paper" else Path(spec)
    if path.suffix == ".pth":
        return RunConfig()  # the study's checkpoints: the paper's task and architecture
    if path.suffix == ".safetensors":
        path = path.parent
    try:
        return RunConfig.from_dict(load_json(path / "config.json"))
    except Exception:  # absent or unreadable: load_model says why, in its own words
        return None


def peek_model_config(spec: str | Path) -> ModelConfig | None:
    """The model config of :func:`peek_run_config`."""
    config = peek_run_config(spec)
    return None if config is None else config.model
