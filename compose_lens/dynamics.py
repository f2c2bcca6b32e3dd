"""Training dynamics: every checkpoint evaluated, and the three phases found from the curves.

The study (SPEC section 6, item 7) reads its training run as three phases:

1. **modular addition** is learned first: the 0-var accuracy on *held-out* pairs
   reaches its plateau (around step 4.5k in the reference run);
2. the **variable-assignment structure** forms: sequences with variables in their
   allowed slots are solved, on training and held-out pairs alike (around 6k);
3. a late **refinement** (around 14k-16k) in which the *var-restricted* 2-var
   sequences, whose variables sit in slots never seen in training, are finally
   solved. In that phase the layer-1 ``=`` query's score for each variable key,
   ``(E_= + P_last) QK_1 E_var^T / sqrt(d_head)``, equalises across variables: the
   ``=`` token stops preferring the variables it saw in that slot in training.

:func:`trajectory` evaluates every checkpoint of a run directory
(``checkpoints/step_NNNNNN/``) or of a folder of the study's ``step_N.pth`` files:
the nine pool accuracies, the circuit measures of
:func:`compose_lens.analysis.summary.circuit_measures` (when that module is
present), the ``=``-query variable scores and the accuracy of each forbidden
operand slot (``b`` as the right operand, ``k`` as the left one, ...). One model is
built once and each checkpoint's weights are loaded into it; the next checkpoint
is read from disk on a worker thread while the current one is evaluated.

:func:`find_phases` applies one documented rule to the curves, never a typed-in
step. The **onset** of a phase is the first checkpoint step ``s`` at which its
metric is at or above ``threshold`` and never falls below ``threshold - margin``
at any later checkpoint ("crosses and stays"; the margin, 0.1 for every phase,
lets pool sampling noise and a brief loss spike pass, as the reference run has
at step 25k, while a fall back to the earlier plateau does not). The bracket ``[last checkpoint before s, s]`` and the step where the
curve crosses the threshold, interpolated linearly inside that bracket, are
reported too, since sparse checkpoints only bound the jump.

>>> import pandas as pd
>>> phase_onset([100, 200, 300, 400], [0.1, 0.95, 0.5, 0.99], threshold=0.9, margin=0.05)["step"]
400
>>> phase_onset([100, 200, 300], [0.1, 0.95, 0.93], threshold=0.9, margin=0.05)["interpolated_step"]
194.1
"""

from __future__ import annotations

import argparse
import math
import re
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Callable, Sequence

import pandas as pd
import torch
from tqdm.auto import tqdm

from compose_lens import __version__, code_version, lens
from compose_lens.analysis.activations import torch_threads
from compose_lens.config import ComposeLensError, RunConfig, load_json, write_json_atomic
from compose_lens.evaluate import correct_mask, pool_accuracies
from compose_lens.model import WEIGHTS_FILE, build_model, load_weights, _read_safetensors
from compose_lens.sampler import Batch, make_pools, render
from compose_lens.split import Split, derived_generator

DYNAMICS_FILE, PHASES_FILE = "dynamics.csv", "phases.json"
_SLOT_STREAM = 7  # generator stream of the forbidden-slot batches

# Derived curves the phase rules read (also written to dynamics.csv).
ASSIGNMENT_POOLS = ("1var_train", "1var_add_restricted", "2var_train", "2var_add_restricted")
REFINEMENT_POOLS = ("2var_var_restricted_1", "2var_var_restricted_2")


# -- the checkpoints of a run ---------------------------------------------------------------


@dataclass(frozen=True)
class Checkpoint:
    """One saved model of a training run: its step and where its weights are."""

    step: int
    path: Path
    kind: str  # "safetensors" (a compose-lens checkpoint directory) or "pth" (the study's)


_RUN_CKPT = re.compile(r"^step_(\d+)$")
_PTH_CKPT = re.compile(r"^step_(\d+)\.pth$")


def find_checkpoints(source: str | Path, split_file: str | Path | None = None
                     ) -> tuple[list[Checkpoint], RunConfig, Split]:
    """The checkpoints of ``source`` in step order, with the run's configuration and split.

    ``source`` is a run directory (``config.json``, ``split.json``,
    ``checkpoints/step_NNNNNN/``), its ``checkpoints`` folder, or a folder of
    ``step_N.pth`` files with a ``split.json`` (the study's layout; ``final.pth``
    has no step in its name and is left out).
    """
    source = Path(source)
    if not source.is_dir():
        raise ComposeLensError(f"{source}: not a directory; give a run directory or a folder of "
                               f"step_N.pth checkpoints")
    pth = sorted((int(m.group(1)), p) for p in source.iterdir() if (m := _PTH_CKPT.match(p.name)))
    if pth:
        split_path = split_file or (source / "split.json")
        if not Path(split_path).exists():
            raise ComposeLensError(f"{source}: the study's checkpoints need their split.json; "
                                   f"pass --split FILE")
        split = Split.load(split_path)
        return [Checkpoint(s, p, "pth") for s, p in pth], RunConfig(task=split.task), split
    run_dir = source.parent if source.name == "checkpoints" else source
    ckpt_dir = run_dir / "checkpoints"
    if not ckpt_dir.is_dir():
        raise ComposeLensError(f"{source}: no checkpoints/ folder and no step_N.pth files here")
    found = sorted((int(m.group(1)), p) for p in ckpt_dir.iterdir()
                   if (m := _RUN_CKPT.match(p.name)) and (p / WEIGHTS_FILE).exists())
    if not found:
        raise ComposeLensError(f"{ckpt_dir}: no step_NNNNNN/{WEIGHTS_FILE} checkpoints yet")
    config_file = run_dir / "config.json"
    if not config_file.exists():
        config_file = found[0][1] / "config.json"
    config = RunConfig.from_dict(load_json(config_file))
    if split_file is None and (run_dir / "split.json").exists():
        split_file = run_dir / "split.json"
    split = Split.load(split_file, config.task) if split_file else Split.from_task(config.task)
    config = RunConfig(task=split.task, model=config.model, train=config.train)
    return [Checkpoint(s, p, "safetensors") for s, p in found], config, split


def select_checkpoints(checkpoints: list[Checkpoint], steps: Sequence[int] | None = None,
                       stride: int = 1) -> list[Checkpoint]:
    """Keep the listed steps (all if None), then every ``stride``-th one (the last always kept)."""
    if steps:
        wanted = set(int(s) for s in steps)
        missing = sorted(wanted - {c.step for c in checkpoints})
        if missing:
            raise ComposeLensError(f"no checkpoint at step(s) {missing[:5]}; available: "
                                   f"{[c.step for c in checkpoints][:10]}...")
        checkpoints = [c for c in checkpoints if c.step in wanted]
    if stride > 1:
        kept = checkpoints[::stride]
        if kept[-1] is not checkpoints[-1]:
            kept.append(checkpoints[-1])
        checkpoints = kept
    return checkpoints


def read_state(checkpoint: Checkpoint, config: RunConfig) -> dict[str, torch.Tensor]:
    """A checkpoint's weights in the bridge layout (the study's .pth files converted)."""
    if checkpoint.kind == "pth":
        try:
            legacy = torch.load(checkpoint.path, weights_only=True, map_location="cpu")
        except Exception as exc:  # torch raises several types for a bad file
            raise ComposeLensError(f"{checkpoint.path}: unreadable ({type(exc).__name__})") from None
        return lens.convert_legacy_state_dict(legacy, config.model)
    return _read_safetensors(checkpoint.path / WEIGHTS_FILE)


# -- the refinement analyses ----------------------------------------------------------------


def equals_variable_scores(model: lens.Model, config: RunConfig, head: int = 0) -> torch.Tensor:
    """Layer-1 score of the ``=`` query at the last position for each variable key.

    ``(E_= + P_last) W_Q (E_var W_K)^T / sqrt(d_head)``, one value per variable
    (a..l), from the weights alone. Key positions are left out: the score says
    which variable *tokens* the ``=`` query prefers.
    """
    params = lens.parameters(model)
    task, cfg = config.task, config.model
    d_head = cfg.d_head
    rows = slice(head * d_head, (head + 1) * d_head)
    with torch.no_grad():
        E, P = params["embed.weight"].float(), params["pos_embed.weight"].float()
        query = E[task.equals_token] + P[task.seq_len - 1]
        q = query @ params["blocks.0.attn.q.weight"][rows].float().T
        var_tokens = torch.arange(task.first_var_token, task.d_vocab, device=E.device)
        keys = E[var_tokens] @ params["blocks.0.attn.k.weight"][rows].float().T
        return (keys @ q / math.sqrt(d_head)).cpu()


def forbidden_slot_batches(split: Split, size: int = 500, seed: int = 0) -> dict[str, Batch]:
    """Training-pair sequences with one variable in a slot forbidden to it in training.

    For each forbidden (side, variable): ``1var_<side>_<v>`` puts ``v`` alone in that
    slot; ``2var_<side>_<v>`` pairs it with an allowed variable on the other side.
    ``b`` as the right operand is ``1var_right_b`` / ``2var_right_b``.
    """
    task = split.task
    out: dict[str, Batch] = {}
    slots = [("left", v) for v in task.left_forbidden] + [("right", v) for v in task.right_forbidden]
    for index, (side, name) in enumerate(slots):
        g = derived_generator(seed, _SLOT_STREAM, index)
        var = task.var_index(name)
        pairs = split.train_pairs[torch.randint(0, len(split.train_pairs), (size,), generator=g)]
        none = torch.full((size,), -1, dtype=torch.long)
        fixed = torch.full((size,), var, dtype=torch.long)
        others = [i for i in (task.allowed_right if side == "left" else task.allowed_left) if i != var]
        partner = torch.tensor(others)[torch.randint(0, len(others), (size,), generator=g)]
        if side == "left":
            one, two = (fixed, none), (fixed, partner)
        else:
            one, two = (none, fixed), (partner, fixed)
        out[f"1var_{side}_{name}"] = render(split, torch.stack([pairs[:, 0], pairs[:, 1], *one], 1), g)
        out[f"2var_{side}_{name}"] = render(split, torch.stack([pairs[:, 0], pairs[:, 1], *two], 1), g)
    return out


def slot_accuracies(model: lens.Model, config: RunConfig, batches: dict[str, Batch]) -> dict[str, float]:
    names = list(batches)
    if not names:
        return {}
    joined = Batch(torch.cat([batches[n].tokens for n in names]), torch.cat([batches[n].labels for n in names]),
                   torch.cat([batches[n].rows for n in names]))
    correct = correct_mask(model, config.model, joined)
    out, start = {}, 0
    for name in names:
        out[f"slot_{name}"] = correct[start: start + len(batches[name])].float().mean().item()
        start += len(batches[name])
    return out


# -- the circuit measures (compose_lens.analysis, when present) -------------------------


def circuit_measures_function() -> Callable | None:
    """``compose_lens.analysis.summary.circuit_measures`` if that module is installed, else None."""
    try:
        from compose_lens.analysis.summary import circuit_measures
    except ImportError:
        return None
    return circuit_measures


# -- the trajectory --------------------------------------------------------------------------


@dataclass
class Trajectory:
    """The per-checkpoint table and how long it took."""

    table: pd.DataFrame
    config: RunConfig
    split: Split
    source: str
    seconds: float
    circuit: bool
    evaluated: int = 0  # checkpoints evaluated now (the others came from a previous table)
    settings: dict | None = None  # pool_size, slot_size, seed, circuit: what a reused table must match

    @property
    def seconds_per_checkpoint(self) -> float:
        return self.seconds / max(self.evaluated, 1)


def add_derived_columns(table: pd.DataFrame, variables: Sequence[str] = ()) -> pd.DataFrame:
    """The curves the phase rules read, and the spread of the ``=`` variable scores."""
    table = table.copy()
    table["addition_accuracy"] = table["0var_add_restricted"]
    table["assignment_accuracy"] = table[list(ASSIGNMENT_POOLS)].mean(axis=1)
    table["refinement_accuracy"] = table[list(REFINEMENT_POOLS)].min(axis=1)
    score_cols = [f"equals_score_{v}" for v in variables if f"equals_score_{v}" in table]
    if score_cols:
        table["equals_score_spread"] = table[score_cols].max(axis=1) - table[score_cols].min(axis=1)
    return table


def trajectory(source: str | Path, split_file: str | Path | None = None, pool_size: int = 2000,
               slot_size: int = 500, seed: int = 0, circuit: bool = True, steps: Sequence[int] | None = None,
               stride: int = 1, progress: bool = True, device: str = "cpu", threads: int = 1,
               known: pd.DataFrame | None = None) -> Trajectory:
    """Evaluate every (selected) checkpoint of ``source``; one row per checkpoint.

    ``known``: rows already evaluated (a previous ``dynamics.csv`` of the same run and
    settings); their steps are not evaluated again, so a growing run is updated cheaply.

    ``threads=1`` by default: each checkpoint is a few hundred small tensor ops, which
    one thread runs fastest; on a busy 2-core machine two threads were 5x slower.
    """
    with torch_threads(threads):
        return _trajectory(source, split_file, pool_size, slot_size, seed, circuit, steps, stride, progress,
                           device, known)


def _trajectory(source, split_file, pool_size, slot_size, seed, circuit, steps, stride, progress,
                device, known) -> Trajectory:
    checkpoints, config, split = find_checkpoints(source, split_file)
    checkpoints = select_checkpoints(checkpoints, steps, stride)
    wanted = {c.step for c in checkpoints}
    known_rows = [] if known is None else [r for r in known.to_dict("records") if int(r["step"]) in wanted]
    done = {int(r["step"]) for r in known_rows}
    checkpoints = [c for c in checkpoints if c.step not in done]
    measures = circuit_measures_function() if circuit else None
    started = time.perf_counter()
    model = build_model(config, device)
    pools = make_pools(split, pool_size, seed)
    slots = forbidden_slot_batches(split, slot_size, seed)
    variables = config.task.variable_names
    rows: list[dict] = []
    bar = tqdm(total=len(checkpoints), disable=not progress, unit="ckpt", desc="dynamics", dynamic_ncols=True)
    with ThreadPoolExecutor(max_workers=1) as reader:
        pending = reader.submit(read_state, checkpoints[0], config) if checkpoints else None
        for i, ckpt in enumerate(checkpoints):
            state = pending.result()
            if i + 1 < len(checkpoints):  # read the next file while this one is evaluated
                pending = reader.submit(read_state, checkpoints[i + 1], config)
            load_weights(model, config, state, str(ckpt.path))
            row: dict[str, float] = {"step": ckpt.step}
            row.update(pool_accuracies(model, config, pools))
            row.update(slot_accuracies(model, config, slots))
            row.update({f"equals_score_{v}": float(s)
                        for v, s in zip(variables, equals_variable_scores(model, config))})
            if measures is not None:
                row.update({k: float(v) for k, v in measures(model, config, split, seed=seed).items()})
            rows.append(row)
            bar.update(1)
            bar.set_postfix(step=ckpt.step, acc2r=f"{row['2var_var_restricted_1']:.2f}")
    bar.close()
    derived = {"addition_accuracy", "assignment_accuracy", "refinement_accuracy", "equals_score_spread"}
    known_rows = [{k: v for k, v in r.items() if k not in derived} for r in known_rows]
    table = pd.DataFrame(known_rows + rows).sort_values("step").reset_index(drop=True)
    table = add_derived_columns(table, variables)
    settings = {"pool_size": pool_size, "slot_size": slot_size, "seed": seed, "circuit": measures is not None,
                "split_file": str(split_file) if split_file else None}
    return Trajectory(table, config, split, str(source), time.perf_counter() - started, measures is not None,
                      evaluated=len(rows), settings=settings)


# -- the phases -------------------------------------------------------------------------------


@dataclass(frozen=True)
class PhaseRule:
    """A phase begins where ``metric`` crosses ``threshold`` and stays above ``threshold - margin``."""

    name: str
    description: str
    metric: str
    threshold: float
    margin: float


PHASE_RULES = (
    PhaseRule("addition", "modular addition learned: 0-var accuracy on held-out pairs at its plateau",
              "addition_accuracy", 0.97, 0.10),
    PhaseRule("assignment", "variable-assignment structure formed: mean accuracy of the 1-var and 2-var "
              "pools with variables in allowed slots (train and held-out pairs)",
              "assignment_accuracy", 0.85, 0.10),
    PhaseRule("refinement", "var-restricted 2-var sequences solved: the lower of the one- and "
              "two-forbidden-slot 2-var pool accuracies", "refinement_accuracy", 0.90, 0.10),
)


def phase_onset(steps: Sequence[int], values: Sequence[float], threshold: float, margin: float) -> dict:
    """First step at/above ``threshold`` after which the curve never drops below ``threshold - margin``.

    Returns ``step`` (None if the curve never crosses and stays), ``bracket`` (the
    checkpoint before it and it), ``interpolated_step`` (where the straight line
    between the bracket's two points meets the threshold) and ``later_checkpoints``
    (how many checkpoints after it show that it stays; 0 means provisional: a run
    still training may yet fall back).
    """
    steps, values = list(map(int, steps)), list(map(float, values))
    onset = None
    for i in range(len(steps)):
        if values[i] >= threshold and all(v >= threshold - margin for v in values[i + 1:]):
            onset = i
            break
    if onset is None:
        return {"step": None, "bracket": None, "interpolated_step": None, "later_checkpoints": 0}
    later = len(steps) - 1 - onset  # how many checkpoints confirm that it stays (0: provisional)
    if onset == 0:
        return {"step": steps[0], "bracket": [steps[0], steps[0]], "interpolated_step": float(steps[0]),
                "later_checkpoints": later}
    s0, s1, v0, v1 = steps[onset - 1], steps[onset], values[onset - 1], values[onset]
    frac = (threshold - v0) / (v1 - v0) if v1 > v0 else 1.0
    return {"step": s1, "bracket": [s0, s1], "interpolated_step": round(s0 + frac * (s1 - s0), 1),
            "later_checkpoints": later}


def find_phases(table: pd.DataFrame, rules: Sequence[PhaseRule] = PHASE_RULES) -> dict:
    """The onset of each phase from a dynamics table (see :func:`phase_onset`)."""
    table = table.sort_values("step")
    out = {}
    for rule in rules:
        onset = phase_onset(table["step"], table[rule.metric], rule.threshold, rule.margin)
        out[rule.name] = {**onset, **asdict(rule)}
    return out


STUDY_PHASES = {"addition": "~4.5k", "assignment": "~6k", "refinement": "~14k-16k"}


def write_dynamics(traj: Trajectory, out: str | Path) -> dict:
    """Write ``dynamics.csv`` and ``phases.json`` into ``out``; return the phases document."""
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    traj.table.to_csv(out / DYNAMICS_FILE, index=False)
    n = len(traj.table)
    doc = {
        "phases": find_phases(traj.table),
        "study": STUDY_PHASES,
        "rule": "onset = first checkpoint step at which the metric is >= threshold and never falls "
                "below threshold - margin at any later checkpoint; bracket = [previous checkpoint, onset]; "
                "interpolated_step = linear interpolation of the threshold crossing inside the bracket",
        "source": traj.source,
        "checkpoints": n,
        "steps": [int(s) for s in traj.table["step"]],
        "circuit_measures": traj.circuit,
        "settings": traj.settings,
        "timing": {"seconds": round(traj.seconds, 2), "evaluated_now": traj.evaluated,
                   "seconds_per_checkpoint": round(traj.seconds_per_checkpoint, 3),
                   "extrapolated_300_checkpoints_s": round(300 * traj.seconds_per_checkpoint, 1)},
        "config": traj.config.to_dict(),
        "code_version": code_version(),
        "compose_lens_version": __version__,
    }
    write_json_atomic(out / PHASES_FILE, doc)
    return doc


def load_dynamics(directory: str | Path) -> tuple[pd.DataFrame, dict]:
    """Read back ``dynamics.csv`` and ``phases.json`` from a directory written by :func:`write_dynamics`."""
    directory = Path(directory)
    if not (directory / DYNAMICS_FILE).exists():
        raise ComposeLensError(f"{directory}: no {DYNAMICS_FILE}; run `compose-lens dynamics RUN --out {directory}`")
    return pd.read_csv(directory / DYNAMICS_FILE), load_json(directory / PHASES_FILE)


def previous_table(directory: str | Path, settings: dict) -> pd.DataFrame | None:
    """The rows of an earlier ``dynamics.csv`` in ``directory`` if it was made with ``settings``."""
    directory = Path(directory)
    if not (directory / DYNAMICS_FILE).exists() or not (directory / PHASES_FILE).exists():
        return None
    saved = load_json(directory / PHASES_FILE).get("settings")
    if saved != settings:
        raise ComposeLensError(f"{directory}: its dynamics were made with other settings ({saved}); "
                               f"drop --update or use another --out")
    return pd.read_csv(directory / DYNAMICS_FILE)


# -- command line ---------------------------------------------------------------------------


def _cmd_dynamics(args: argparse.Namespace) -> int:
    steps = [int(s) for s in args.steps.split(",")] if args.steps else None
    known = previous_table(args.out, {"pool_size": args.pool_size, "slot_size": args.slot_size, "seed": args.seed,
                                      "circuit": not args.no_circuit and circuit_measures_function() is not None,
                                      "split_file": args.split}) if args.update else None
    traj = trajectory(args.source, args.split, pool_size=args.pool_size, slot_size=args.slot_size,
                      seed=args.seed, circuit=not args.no_circuit, steps=steps, stride=args.stride,
                      progress=not args.quiet, device=args.device, threads=args.threads, known=known)
    doc = write_dynamics(traj, args.out)
    t = doc["timing"]
    print(f"{t['evaluated_now']} of {doc['checkpoints']} checkpoints evaluated in {t['seconds']:.1f} s ({t['seconds_per_checkpoint']:.2f} s each; "
          f"300 checkpoints ~ {t['extrapolated_300_checkpoints_s'] / 60:.1f} min); circuit measures: "
          f"{'yes' if traj.circuit else 'no'}")
    for name, phase in doc["phases"].items():
        where = (f"step {phase['step']} (between {phase['bracket'][0]} and {phase['bracket'][1]}, "
                 f"crossing ~{phase['interpolated_step']:.0f}; {phase['later_checkpoints']} later checkpoints "
                 f"confirm it)" if phase["step"] is not None else "not reached")
        print(f"  {name:11s} {where}   [study: {STUDY_PHASES[name]}]")
    print(f"wrote {Path(args.out) / DYNAMICS_FILE} and {Path(args.out) / PHASES_FILE}")
    return 0


def register(sub) -> None:
    p = sub.add_parser("dynamics", help="evaluate every checkpoint of a run and find the three phases")
    p.add_argument("source", help="run directory, its checkpoints/ folder, or a folder of step_N.pth files")
    p.add_argument("--split", help="split file (default: the run's split.json)")
    p.add_argument("--out", required=True, help="directory for dynamics.csv and phases.json")
    p.add_argument("--pool-size", type=int, default=2000, help="sequences per accuracy pool")
    p.add_argument("--slot-size", type=int, default=500, help="sequences per forbidden-slot batch")
    p.add_argument("--steps", help="only these checkpoint steps, comma-separated")
    p.add_argument("--stride", type=int, default=1, help="every k-th checkpoint (the last always kept)")
    p.add_argument("--no-circuit", action="store_true", help="skip the circuit measures (pools only)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--device", default="cpu")
    p.add_argument("--threads", type=int, default=1, help="torch threads (1 is fastest for these small ops)")
    p.add_argument("--update", action="store_true",
                   help="keep the rows of OUT/dynamics.csv (same settings) and evaluate only new checkpoints")
    p.add_argument("--quiet", action="store_true", help="no progress bar")
    p.set_defaults(func=_cmd_dynamics)


def load_checkpoint(source: str | Path, step: int | None = None, split_file: str | Path | None = None,
                    device: str = "cpu"):
    """The model of ``source`` at checkpoint ``step`` (the last one if None) as a
    :class:`compose_lens.model.Loaded`, with the run's configuration and split."""
    from compose_lens.model import Loaded

    checkpoints, config, split = find_checkpoints(source, split_file)
    chosen = checkpoints[-1] if step is None else select_checkpoints(checkpoints, [step])[0]
    model = build_model(config, device)
    load_weights(model, config, read_state(chosen, config), str(chosen.path))
    return Loaded(model, config, split, f"{chosen.path} (step {chosen.step})")


def checkpoint_steps(source: str | Path) -> list[int]:
    """The steps of the checkpoints of ``source`` (see :func:`find_checkpoints`)."""
    return [c.step for c in find_checkpoints(source)[0]]
