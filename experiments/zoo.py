"""The verdict zoo: models whose mechanism is known, and how often compose-lens's verdicts are wrong on them.

    python experiments/zoo.py build             # train what is missing (niced), copy it in, write index.csv
    python experiments/zoo.py score             # every verdict on every model: verdicts.csv, scorecard.csv
    python experiments/zoo.py score --null      # ... and rewrite the causal null the locator reads
    python experiments/zoo.py score --fast      # the CI subset: planted and small models, no modularity
    python experiments/zoo.py circuits          # EAP, EAP-IG, ACDC against every known circuit: circuits.csv

An interpretability tool's worst failure is to find the circuit it looks for where there is none.
The field measures a method on models whose mechanism is known by construction (InterpBench's
SIIT-trained transformers, MIB's localisation tracks, Tracr's compiled programs). None scores a
*verdict*; this does, for every verdict and role locator of compose-lens, on a zoo of
``experiments/results/zoo/index.csv``. Its classes:

* ``recipe``: the study's recipe at seeds that generalised in the by-seed study, trained until the
  headline held or 20,000 steps (whether it holds here is measured: ``truth_composes``);
* ``stalled``: the recipe at seeds that stalled in the by-seed study, 10,000 steps: the operation
  learned, no binding;
* ``no-binding``: trained without variables (``variables_in_training=false``), and the study's
  initialisation untrained;
* ``shape``: the recipe in other shapes (2 heads; MLPs in both layers; 3 layers);
* ``outside``: trained with plain TransformerLens by ``experiments/own_model.py`` (another
  vocabulary layout, operation and query form), generalised, stalled, and trained on queries of the
  last-assigned variable only (an answer without binding);
* ``planted``: the paper model rearranged by hand (``experiments/zoo_planted.py``): decoy heads,
  two same-MLP negatives of two kinds (orthogonal subspaces; gated adders, one per operand kind,
  in two orders), the binder removed;
* ``layernorm``: the recipe and an outside model with LayerNorm.

**Ground truth.** Planted models: by construction. Trained models: from their answers
(:func:`compose_lens.training.evaluate.learned`) and their architecture. A model that does not bind (1-var
below 0.9) has no binder and no router: roles are functional, a head whose binding no answer
uses plays none. A model of the study's shape (2 layers, 1 head, one MLP) that binds has them
where the shape forces them: the one layer-1 head binds, the one layer-2 head routes, the one MLP
adds (a 2-layer model cannot bind otherwise). Other shapes that bind: the roles exist but which
head plays them is not known (``?``): such a model counts towards recall (a role found) and not
towards precision. The same-MLP and modularity answers are known for the planted models (``no``
for the negatives) and for models that do not compose (``untestable``: the study's headline does not
hold, and the right verdict is ``inconclusive``); for the study's shape that composes they are the
study's finding (``yes``), which ``truth_source`` says.

**Scores** (``scorecard.csv``): per verdict, truth x verdict counts; per role, precision and recall
of the located component; each rate with its Wilson interval; the false-positive rates on the
negatives; the inconclusive rate per class. ``--null`` writes the causal null of
:mod:`compose_lens.analysis.locate` (``compose_lens/assets/role_null.json``): the largest fall any
head that reaches a role's attention threshold but lacks the role causes when mean-ablated, over
the zoo; the scorecard also re-judges every role with that null computed without the model being
judged (leave one model out), so the null is not fitted to the answer it is scored on.
"""

from __future__ import annotations

import argparse
import json
import shutil
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

import pandas as pd
import torch

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "experiments"))

import zoo_planted  # noqa: E402

from compose_lens.core import stats  # noqa: E402
from compose_lens.analysis import locate as locating  # noqa: E402
from compose_lens.registry.same_mlp import comparisons as same_mlp  # noqa: E402
from compose_lens.registry.modularity import measures as modularity  # noqa: E402
from compose_lens.core.config import RunConfig  # noqa: E402
from compose_lens.training.evaluate import composition_gap, learned  # noqa: E402
from compose_lens.core.errors import ComposeLensError  # noqa: E402
from compose_lens.training.subject import load_subject  # noqa: E402
from compose_lens.sweep import train_points_in_process  # noqa: E402

OUT = ROOT / "experiments" / "results" / "zoo"
MODELS = OUT / "models"
NULL_FILE = locating.NULL_FILE
PAPER_SHAPE = "the study's shape"

SEEDS = ["--set", "seed={s}", "--set", "init_seed={s}", "--set", "train.seed={s}"]
SHAPES = {"heads2": ["--set", "model.n_heads=2", "--set", "model.d_head=64"], "mlp01": ["--set", "mlp_blocks=[0,1]"],
          "layers3": ["--set", "n_layers=3", "--set", "mlp_blocks=[2]"], "ln": ["--set", "normalization_type=LN"]}
SLOW_EVAL = ["--set", "eval_every=500", "--set", "pool_size=500"]


@dataclass(frozen=True)
class Entry:
    """One zoo model: how it is made and what is known of it before it is measured."""

    name: str
    kind: str  # the class
    how: str  # "train" (compose-lens train), "outside" (own_model.py) or "planted"
    args: tuple[str, ...] = ()  # the command's arguments (train / outside), or the builder's (planted)
    shape: str = PAPER_SHAPE
    fast: bool = False  # in the CI subset
    note: str = ""


def _train(seed: int, *extra: str) -> tuple[str, ...]:
    return tuple(a.format(s=seed) for a in SEEDS) + ("--set", "checkpoint_every=1000", *extra)


ENTRIES = (
    *(Entry(f"recipe-{s}", "recipe", "train", _train(s, "--set", "stop_at=generalised", "--set", "steps=20000"))
      for s in (2021, 2024, 2054, 2057, 2038, 2004, 2047, 2025)),
    *(Entry(f"stalled-{s}", "stalled", "train", _train(s, "--set", "steps=10000"), fast=s == 2001)
      for s in (2001, 2003, 2008, 2010, 2013, 2022)),
    *(Entry(f"novar-{s}", "no-binding", "train", _train(s, "--set", "variables_in_training=false", "--set", "steps=3000"),
            fast=s == 1) for s in (1, 2, 3)),
    *(Entry(f"random-{s}", "no-binding", "planted", ("random_init", str(s)), fast=s == 1) for s in (1, 2)),
    Entry("heads2-2021", "shape", "train", _train(2021, *SHAPES["heads2"], "--set", "steps=8000", *SLOW_EVAL),
          shape="2 heads"),
    Entry("mlp01-2021", "shape", "train", _train(2021, *SHAPES["mlp01"], "--set", "steps=4000", *SLOW_EVAL),
          shape="MLPs in both layers"),
    Entry("layers3-2021", "shape", "train", _train(2021, *SHAPES["layers3"], "--set", "steps=4000", *SLOW_EVAL),
          shape="3 layers"),
    Entry("ln-2021", "layernorm", "train", _train(2021, *SHAPES["ln"], "--set", "steps=4000", *SLOW_EVAL),
          shape="LayerNorm"),
    Entry("outside-sub-infix-0", "outside", "outside", ("--seed", "0"), shape="2 heads, MLPs in both layers"),
    Entry("outside-sub-infix-1", "outside", "outside", ("--seed", "1"), shape="2 heads, MLPs in both layers"),
    Entry("outside-sub-short-2", "outside", "outside", ("--seed", "2", "--steps", "2500"),
          shape="2 heads, MLPs in both layers", fast=True),
    Entry("outside-add-prefix-0", "outside", "outside",
          ("--seed", "0", "--operation", "add", "--query", "prefix", "--mlp-blocks", "last", "--heads", "1"),
          shape=PAPER_SHAPE),
    Entry("outside-mul-prefix-0", "outside", "outside", ("--seed", "0", "--operation", "multiply", "--query", "prefix"),
          shape="2 heads, MLPs in both layers"),
    Entry("outside-last-0", "outside", "outside", ("--seed", "0", "--queries", "last"),
          shape="2 heads, MLPs in both layers", fast=True),
    Entry("outside-last-1", "outside", "outside", ("--seed", "1", "--queries", "last", "--operation", "add",
                                                   "--query", "prefix"), shape="2 heads, MLPs in both layers"),
    Entry("outside-ln-0", "layernorm", "outside", ("--seed", "0", "--layernorm"),
          shape="LayerNorm, 2 heads, MLPs in both layers"),
    Entry("decoy-heads", "planted", "planted", ("decoy_heads",), shape="2 heads"),  # tests/unit/test_learned.py
    Entry("orthogonal-subspaces", "planted", "planted", ("orthogonal_subspaces",), shape="2 heads, wider"),
    Entry("gated-adders", "planted", "planted", ("gated_adders", "constants_first"), shape="3 layers, 2 heads",
          fast=True),
    Entry("gated-adders-swapped", "planted", "planted", ("gated_adders", "variables_first"),
          shape="3 layers, 2 heads"),
    Entry("no-binder-zero", "planted", "planted", ("no_binder", "zero"), fast=True),
    Entry("no-binder-random", "planted", "planted", ("no_binder", "random")),
)


# -- building ---------------------------------------------------------------------------------------


def command_of(entry: Entry, out: Path) -> list[str]:
    """The one seeded command that makes a trained entry into ``out``."""
    if entry.how == "train":
        return [sys.executable, "-m", "compose_lens.cli", "train", "--out", str(out), "--quiet", "--set", "threads=1",
                *entry.args]
    return [sys.executable, str(ROOT / "experiments" / "own_model.py"), "--out", str(out), *entry.args]


KEEP = ("model.safetensors", "config.json", "split.json", "task.json", "results.json", "metrics.jsonl")


def config_of(entry: Entry) -> RunConfig:
    """The configuration ``compose-lens train`` makes of a trained entry's ``--set`` arguments."""
    return RunConfig().with_overrides(["threads=1", *entry.args[1::2]])


def stacks(entries: list[Entry], k: int) -> list[list[Entry]]:
    """The trained entries in groups of at most ``k`` that one process can train together
    (:func:`compose_lens.training.batched.check_compatible`: one shape, one step), in order of first appearance."""
    from compose_lens.training.batched import check_compatible

    groups: list[list[Entry]] = []
    for entry in entries:
        for group in groups:
            if len(group) < k:
                try:
                    check_compatible([config_of(e) for e in (*group, entry)])
                except ComposeLensError:
                    continue
                group.append(entry)
                break
        else:
            groups.append([entry])
    return groups


def build(entries: tuple[Entry, ...], source: Path | None, stack: str = "auto") -> None:
    """Each trained entry into ``models/NAME``: copied from ``source/NAME`` where it was trained already
    (the folder the background queue trained into), else trained here, niced: the entries that share a
    shape ``stack`` at a time in one process (``auto``: the K :func:`compose_lens.training.batched.probe` finds
    fastest in the entries' own precision, fp32; each model's results.json says how many it was stacked
    with), the others alone."""
    MODELS.mkdir(parents=True, exist_ok=True)
    todo = [e for e in entries if e.how != "planted" and not (MODELS / e.name / "model.safetensors").exists()]
    found = {e.name: source / e.name for e in todo if source and (source / e.name / "model.safetensors").exists()}
    trained = [e for e in todo if e.name not in found and e.how == "train"]
    if trained:
        if stack == "auto":
            from compose_lens.training.batched import probe

            config = config_of(trained[0])
            stack = str(probe(config, [k for k in (1, 2, 4, 8) if k <= len(trained)],
                              [config.train.precision])["runs_per_process"])
        for group in stacks(trained, int(stack)):
            scratch = [MODELS / (e.name + ".training") for e in group]
            print(f"training {', '.join(e.name for e in group)} together" if len(group) > 1 else
                  f"training {group[0].name}: {' '.join(command_of(group[0], scratch[0]))}", flush=True)
            outcomes = train_points_in_process([config_of(e).to_dict() for e in group], [str(d) for d in scratch], 1,
                                               nice=19)
            for entry, outcome, directory in zip(group, outcomes, scratch):
                if outcome["status"] != "done":
                    raise SystemExit(f"{entry.name}: training failed: {outcome['error']}")
                found[entry.name] = directory
    for entry in todo:
        if entry.name in found or entry.how != "outside":
            continue
        print(f"training {entry.name}: {' '.join(command_of(entry, MODELS / entry.name))}", flush=True)
        scratch = MODELS / (entry.name + ".training")
        log = subprocess.run(["nice", "-n", "19", *command_of(entry, scratch)], capture_output=True, text=True)
        if log.returncode:
            raise SystemExit(f"{entry.name}: training failed: {log.stderr.strip().splitlines()[-1:]}")
        (scratch / "training.log").write_text(log.stdout)
        found[entry.name] = scratch
    for name, directory in found.items():
        target = MODELS / name
        target.mkdir(exist_ok=True)
        for file in (*KEEP, "training.log"):
            if (directory / file).exists():
                shutil.copy2(directory / file, target / file)
        if directory.name.endswith(".training"):
            shutil.rmtree(directory)
    write_index(entries)


def load(entry: Entry, paper):
    """(subject, truth known before measuring: the planted models' construction, else {})."""
    if entry.how == "planted":
        return zoo_planted.build(entry.args[0], paper, *entry.args[1:])
    return load_subject(MODELS / entry.name), {}


def _study_shape(subject) -> bool:
    """2 layers, 1 head each, one MLP, in the last block: where a binding model's roles are forced."""
    m = subject.config.model
    return (m.n_layers == 2 and m.n_heads == 1 and m.normalization_type is None
            and locating.mlp_blocks(subject.model, subject.config) == [1])


def truth_of(entry: Entry, subject, knows, known: dict, composes: bool) -> dict:
    """The ground truth of the module doc for one model (planted: its construction). ``composes``: the
    study's headline holds on the exhaustive sets (:func:`compose_lens.training.evaluate.composition_gap`)."""
    if known:
        truth = dict(known)
    elif not knows.binds:
        truth = {"truth_binds": False, "truth_binder": "none", "truth_router": "none",
                 "truth_source": "answers: the model does not bind (1-var < 0.9)"}
    elif _study_shape(subject):
        truth = {"truth_binds": True, "truth_binder": "blocks.0 head 0", "truth_router": "blocks.1 head 0",
                 "truth_same_mlp": "yes", "truth_modular": "yes",
                 "truth_source": "answers and shape: it binds, and in the study's shape only the layer-1 head can "
                                 "bind and only the layer-2 head route; same MLP and modular: the study's finding"}
    else:
        truth = {"truth_binds": True, "truth_binder": "?", "truth_router": "?", "truth_same_mlp": "?",
                 "truth_modular": "?", "truth_source": "answers: it binds; which components play the roles is not "
                                                      "known in this shape"}
    if not composes:  # the verdicts are about a model that composes: the right answer is inconclusive
        truth["truth_same_mlp"] = truth["truth_modular"] = "untestable"
    if "truth_adder" not in truth:
        blocks = locating.mlp_blocks(subject.model, subject.config)
        truth["truth_adder"] = ("none" if not knows.operates else f"blocks.{blocks[0]}.mlp" if len(blocks) == 1
                                else "?")
    return {**truth, "truth_composes": composes}


def composes(subject) -> bool:
    """The study's headline on the exhaustive sets (where the split holds them out; else the 2-var pool)."""
    return composition_gap(subject) is None


def write_index(entries: tuple[Entry, ...]) -> pd.DataFrame:
    """index.csv: every model, its class, how it was made and its ground truth (measured answers
    where the truth depends on them)."""
    paper = load_subject("paper")
    rows = []
    for entry in entries:
        subject, known = load(entry, paper)
        knows = learned(subject)
        how = (" ".join(command_of(entry, Path("experiments/results/zoo/models") / entry.name)[1:])
               .replace(str(ROOT) + "/", "") if entry.how != "planted"
               else f"experiments/zoo_planted.py {entry.args[0]}({', '.join(['paper', *entry.args[1:]])})")
        rows.append({"model": entry.name, "class": entry.kind, "shape": entry.shape, "made_by": how,
                     "in_ci": entry.fast, "state": knows.state, "operation": round(knows.operation.fraction, 4),
                     "binding": round(knows.binding.fraction, 4), "picking": round(knows.picking, 4),
                     "two_var": round(knows.composition.fraction, 4),
                     **truth_of(entry, subject, knows, known, composes(subject))})
    index = pd.DataFrame(rows)
    OUT.mkdir(parents=True, exist_ok=True)
    index.to_csv(OUT / "index.csv", index=False)
    print(f"wrote {OUT / 'index.csv'}: {len(index)} models, {index['class'].nunique()} classes")
    return index


# -- scoring ----------------------------------------------------------------------------------------


@dataclass
class Measured:
    """Every verdict of one model."""

    row: dict
    heads: list[dict] = field(default_factory=list)  # every head's attention score and causal fall, per role


def head_falls(subject, location) -> list[dict]:
    """Every head's attention score and causal fall for the binder and router roles, whatever the gates
    (the zoo's null is made of the falls of heads that lack a role)."""
    table = location.candidates
    heads = table[table["role"].isin(["binder", "router"])]
    forward = locating.Forward(subject.model, subject.config.model)
    tokens, labels = locating.variable_prompts(subject.split)
    clean = locating.predictions(forward.logits(tokens)) == labels
    rows = []
    with torch.no_grad():
        for row in heads.itertuples():
            value, low, high = locating.causal_fall(forward, row.role, int(row.layer), int(row.head), tokens, labels,
                                                    subject.config.task.context_len, clean)
            rows.append({"role": row.role, "component": row.component, "score": row.score,
                         "reaches_threshold": bool(row.score >= locating.THRESHOLDS[row.role]),
                         "fall": value, "fall_low": low, "fall_high": high})
    return rows


def measure(entry: Entry, subject, known: dict, with_modularity: bool, with_heads: bool = True) -> Measured:
    """Every verdict of one model, beside its truth (:func:`truth_of`, ``known``: the planted models'
    construction), read from what the locator found it has learned (its answers, evaluated once)."""
    started = time.time()
    location = locating.locate(subject)
    truth = truth_of(entry, subject, location.learned, known, composes(subject))
    row = {"model": entry.name, "class": entry.kind, **truth, "state": location.learned.state,
           **{f"located_{r.role}": r.component or "none" for r in location.roles()},
           **{f"why_{r.role}": r.line() for r in location.roles()}}
    try:
        report = same_mlp.same_mlp_report(subject, n=200)
        row["same_mlp"], row["same_mlp_reason"] = report["verdict"], report["verdict_reason"]
    except ComposeLensError as refused:  # a model the tests cannot read: no verdict, said why
        row["same_mlp"], row["same_mlp_reason"] = "inconclusive", f"refused: {refused}"
    if with_modularity:
        try:
            found = modularity.measure(subject)
            row["modularity"], row["modularity_reason"] = found["modularity_verdict"], found.get("modularity_reason")
            for key in ("modularity_separation", "modularity_separation_low", "modularity_separation_high"):
                row[key] = found.get(key)  # the verdict's measure (a), beside its threshold modularity.SEPARATION_MIN
        except ComposeLensError as refused:
            row["modularity"], row["modularity_reason"] = "inconclusive", f"refused: {refused}"
    else:  # the fast subset: the verdict's rule on what it has (no same adder: never modular)
        row["modularity"] = ("inconclusive" if row["same_mlp"] == "inconclusive" else
                             modularity.verdict(modularity.INCONCLUSIVE,
                                                1.0 if row["same_mlp"] == "supported" else 0.0))
        row["modularity_reason"] = "fast subset: from the same-MLP verdict alone"
    heads = head_falls(subject, location) if with_heads else []
    row["seconds"] = round(time.time() - started, 1)
    return Measured(row, heads)


def _rate(k: int, n: int) -> dict:
    low, high = stats.wilson_interval(k, n)
    return {"k": k, "n": n, "rate": k / n if n else float("nan"), "ci_low": low, "ci_high": high}


def null_of(heads: pd.DataFrame, role: str, leave_out: str | None = None) -> float:
    """The largest causal fall of a head that reaches ``role``'s attention threshold but lacks the role
    (its model's truth names another component, or none), over the zoo (less ``leave_out``'s model)."""
    rows = heads[(heads["role"] == role) & heads["reaches_threshold"] & (heads["truth"] != "?")
                 & (heads["component"] != heads["truth"])]
    if leave_out is not None:
        rows = rows[rows["model"] != leave_out]
    return float(rows["fall"].max()) if len(rows) else 0.0


def rejudge(heads: pd.DataFrame, verdicts: pd.DataFrame, leave_one_out: bool = True) -> pd.DataFrame:
    """Each role re-located with the null computed without its own model (leave one model out; else
    with the whole zoo's), the binding gate kept: the located component per model and role."""
    rows = []
    for v in verdicts.itertuples():
        for role in ("binder", "router"):
            null = null_of(heads, role, leave_out=v.model if leave_one_out else None)
            mine = heads[(heads["model"] == v.model) & (heads["role"] == role) & heads["reaches_threshold"]]
            mine = mine.sort_values("score", ascending=False, kind="stable")
            passed = mine[mine["fall_low"] > null]
            located = passed["component"].iloc[0] if (v.state == "binds" and len(passed)) else "none"
            rows.append({"model": v.model, "role": role, "null_without_it": null, "located": located})
    return pd.DataFrame(rows)


NEGATIVE_SAME_MLP = ("no", "untestable")


def scorecard(verdicts: pd.DataFrame, loo: pd.DataFrame | None = None) -> pd.DataFrame:
    """The scores of the module doc, one row each."""
    rows = []

    def add(kind, what, subset, k, n, note=""):
        rows.append({"kind": kind, "measure": what, "subset": subset, **_rate(k, n), "note": note})

    # verdicts: truth x verdict
    for verdict_col, truth_col, positive in (("same_mlp", "truth_same_mlp", "supported"),
                                             ("modularity", "truth_modular", "modular")):
        for truth in ("yes", "no", "untestable"):
            group = verdicts[verdicts[truth_col] == truth]
            for answer in sorted(verdicts[verdict_col].unique()):
                add("verdict", f"{verdict_col} = {answer}", f"truth {truth}", int((group[verdict_col] == answer).sum()),
                    len(group))
        negatives = verdicts[verdicts[truth_col].isin(NEGATIVE_SAME_MLP)]
        add("false positive", f"{verdict_col} = {positive}", "truth no or untestable",
            int((negatives[verdict_col] == positive).sum()), len(negatives),
            "a verdict that the mechanism is there, on a model without it")
        na = verdicts[verdicts[truth_col] == "untestable"]
        add("correct", f"{verdict_col} = inconclusive", "truth untestable", int((na[verdict_col] == "inconclusive").sum()),
            len(na), "the model cannot do what the verdict is about")
    # roles: precision and recall
    for role in ("binder", "router", "adder"):
        truth, found = verdicts[f"truth_{role}"], verdicts[f"located_{role}"]
        known = truth != "?"
        located = found != "none"
        right = located & (found == truth)
        add("role", f"{role} precision", "located, truth known", int((right & known).sum()), int((located & known).sum()))
        exists = truth != "none"
        add("role", f"{role} recall", "the role exists", int((located & exists & ((found == truth) | ~known)).sum()),
            int(exists.sum()), "truth '?': any component found counts")
        absent = truth == "none"
        add("false positive", f"{role} located", "truth none", int((located & absent).sum()), int(absent.sum()),
            "a component named for a role the model lacks")
        if loo is not None and role != "adder":
            mine = loo[loo["role"] == role].set_index("model")["located"].reindex(verdicts["model"]).to_numpy()
            loo_found = pd.Series(mine, index=verdicts.index)
            add("role (null without the model)", f"{role} located", "truth none",
                int(((loo_found != "none") & absent).sum()), int(absent.sum()))
            add("role (null without the model)", f"{role} precision", "located, truth known",
                int(((loo_found != "none") & (loo_found == truth) & known).sum()),
                int(((loo_found != "none") & known).sum()))
    # inconclusive rate per class
    for kind, group in verdicts.groupby("class"):
        add("inconclusive", "same_mlp = inconclusive", f"class {kind}", int((group["same_mlp"] == "inconclusive").sum()),
            len(group))
        add("inconclusive", "modularity = inconclusive", f"class {kind}",
            int((group["modularity"] == "inconclusive").sum()), len(group))
    return pd.DataFrame(rows)


def score(entries: tuple[Entry, ...], with_modularity: bool, write_null: bool, out: Path,
          with_heads: bool = True) -> pd.DataFrame:
    paper = load_subject("paper")
    measured = []
    for entry in entries:
        subject, known = load(entry, paper)
        m = measure(entry, subject, known, with_modularity, with_heads)
        for h in m.heads:
            h.update(model=entry.name, truth=m.row[f"truth_{h['role']}"])
        measured.append(m)
        print(f"{entry.name}: {m.row['state']}; binder {m.row['located_binder']}, router {m.row['located_router']}, "
              f"adder {m.row['located_adder']}; same-MLP {m.row['same_mlp']}; modularity {m.row['modularity']} "
              f"({m.row['seconds']} s)", flush=True)
    verdicts = pd.DataFrame([m.row for m in measured])
    heads = pd.DataFrame([h for m in measured for h in m.heads])
    loo = rejudge(heads, verdicts) if with_heads else None
    card = scorecard(verdicts, loo)
    out.mkdir(parents=True, exist_ok=True)
    verdicts.to_csv(out / "verdicts.csv", index=False)
    if with_heads:
        heads.to_csv(out / "heads.csv", index=False)
        loo.to_csv(out / "leave_one_out.csv", index=False)
    card.to_csv(out / "scorecard.csv", index=False)
    if write_null:
        null = {role: round(null_of(heads, role), 4) for role in ("binder", "router")}
        NULL_FILE.write_text(json.dumps({"null": null, "source": "experiments/zoo.py score --null: the largest causal "
                                         "fall of a head that reaches the role's attention threshold but lacks the "
                                         f"role, over the {len(verdicts)} models of the zoo"}, indent=1) + "\n")
        print(f"wrote {NULL_FILE}: {null}")
        # the roles above were located with the null read at the start; with the new one they must be the same
        again = rejudge(heads, verdicts, leave_one_out=False)
        before = verdicts.melt(id_vars="model", value_vars=["located_binder", "located_router"])
        changed = [(r.model, r.role) for r in again.itertuples()
                   if before[(before.model == r.model) & (before.variable == f"located_{r.role}")]["value"].iloc[0]
                   != r.located]
        if changed:
            raise SystemExit(f"the new null locates other roles in {changed}: run score --null again")
        print("the new null locates the same roles as the one the scores were read with")
    print(f"wrote {out}/verdicts.csv{', heads.csv, leave_one_out.csv' if with_heads else ''}, scorecard.csv")
    return card


# -- circuit discovery against a circuit whose roles are known ---------------------------------------

METHODS = ("eap", "eap-ig", "acdc")


def _head(component: str) -> tuple[int, int]:
    layer, head = component.removeprefix("blocks.").split(" head ")
    return int(layer), int(head)


def known_circuit(truth: dict):
    """The circuit of a model whose three roles are known (one component each), else None."""
    from compose_lens.registry.circuit.discovery import CircuitRoles

    roles = [truth.get(f"truth_{role}", "none") for role in ("binder", "router", "adder")]
    if any(r in ("none", "?") for r in roles):
        return None
    binder, router = _head(roles[0]), _head(roles[1])
    return CircuitRoles(binder, router, int(roles[2].split(".")[1]), gatherer=binder)


def circuits(entries: tuple[Entry, ...], out: Path, n_pairs: int = 150) -> pd.DataFrame:
    """EAP, EAP-IG and ACDC on every model whose circuit is known (index's truth: binder, router and
    adder each one component, and one adder for constants and variables): the ROC-AUC of each method's edge scores against that circuit (the
    paper's edges with each role at its component, compose_lens.registry.circuit.discovery.located_labels), with
    the 95 % bootstrap interval over the edges, one row per model and method; then per class and
    method, the median AUC and its range."""
    from compose_lens.registry.circuit import discovery as C

    index = pd.read_csv(OUT / "index.csv").set_index("model")
    paper = load_subject("paper")
    rows = []
    for entry in entries:
        truth = index.loc[entry.name].to_dict()
        roles = known_circuit(truth)
        if roles is None or truth.get("truth_same_mlp") != "yes":  # one adder for both: the circuit is one graph
            continue
        subject, _ = load(entry, paper)
        try:
            gm = C.GraphModel.from_model(subject.model, subject.config.model, False)
        except ComposeLensError as refused:
            print(f"{entry.name}: no edge graph ({refused})")
            continue
        labels = C.located_labels(gm.graph, roles)
        pairs = C.resample_pairs(subject.split, n_pairs, 0)
        for method in METHODS:
            scores, seconds = C.method_scores(gm, pairs, method)
            auc, ci = C.roc_auc(scores, labels), C.roc_auc_interval(scores, labels)
            rows.append({"model": entry.name, "class": entry.kind, "method": method, "edges": len(labels),
                         "circuit_edges": int(labels.sum()), "roc_auc": auc,
                         "ci_low": None if ci is None else ci[0], "ci_high": None if ci is None else ci[1],
                         "circuit": roles.describe(), "seconds": round(seconds, 2)})
            print(f"{entry.name} {method}: ROC-AUC {auc:.3f} {ci}", flush=True)
    table = pd.DataFrame(rows)
    out.mkdir(parents=True, exist_ok=True)
    table.to_csv(out / "circuits.csv", index=False)
    print(f"wrote {out / 'circuits.csv'}")
    return table


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("what", choices=("build", "score", "circuits"))
    ap.add_argument("--fast", action="store_true", help="the CI subset, without modularity")
    ap.add_argument("--null", action="store_true", help="rewrite the locator's causal null from this zoo")
    ap.add_argument("--only", nargs="+", help="these models only")
    ap.add_argument("--source", type=Path, help="build: a folder where the trained models already are")
    ap.add_argument("--stack", default="auto", metavar="K",
                    help="build: train up to K models of one shape together in one process (auto: a short probe "
                         "of this CPU chooses K; 1: each alone, as the committed zoo was trained)")
    ap.add_argument("--out", type=Path, default=OUT, help="score: where the tables go")
    a = ap.parse_args(argv)
    entries = tuple(e for e in ENTRIES if (not a.fast or e.fast) and (not a.only or e.name in a.only))
    if a.only and len(entries) != len(a.only):
        unknown = sorted(set(a.only) - {e.name for e in ENTRIES})
        raise SystemExit(f"--only: no zoo model {unknown}; the models are {', '.join(e.name for e in ENTRIES)}")
    if a.what == "build":
        if a.stack != "auto" and not (a.stack.isdigit() and int(a.stack) >= 1):
            raise SystemExit(f"--stack {a.stack}: give a whole number of models (4), or auto")
        build(entries, a.source, a.stack)
    elif a.what == "circuits":
        circuits(entries, a.out)
    else:
        card = score(entries, not a.fast, a.null, a.out, with_heads=not a.fast)
        print(card[card["kind"].isin(["false positive", "role"])].to_string(index=False))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
