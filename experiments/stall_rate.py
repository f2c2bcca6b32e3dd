"""How often does the study's recipe stall? Many trajectories at the study's setting, one table.

    python experiments/stall_rate.py --out experiments/results/stall_rate/fp32 \\
        --seeds 100-111 --kernels native default --workers 2
    python experiments/stall_rate.py --out experiments/results/stall_rate/fp32 --table

Each trajectory is one ``compose-lens train`` at the study's setting (f = 0.7, r = 1, 30,000
steps, batch 512) with its own seed (split, initial weights and data order all set from it) and
its own rounding: the CPU kernels torch picks (``native``: what this CPU offers; ``default``:
``ATEN_CPU_CAPABILITY=default``, the scalar kernels), the thread count and ``torch.compile``.
The same seed under two kernel settings is two trajectories that differ in rounding alone.
Runs stop early once the study's headline holds (``stop_at=generalised``); every other run
trains the full budget, so a late learner is never cut short. ``--stack K`` trains K seeds of one kernel
setting together in one process (:mod:`compose_lens.training.batched`; ``auto``, the default, takes the K a short
probe of this CPU finds fastest, and ``--precision auto`` the precision too, both written to
``probe.json``); each run's ``results.json`` says how many it was stacked with.

A run directory keeps ``config.json``, ``metrics.jsonl`` and ``results.json`` (the weights are
ignored by git); a finished run is skipped and an interrupted one resumes, so the study can be
continued from the repository on any machine. ``--table`` (also written after every run)
reads every run directory, classifies it with :mod:`compose_lens.training.outcome`, and writes
``runs.csv`` (one row per run, finished or not) and ``summary.json``: the stall rate **counted by
seed** (:data:`ONE_PER_SEED` picks one trajectory per seed; a seed's runs share split, weights and
data order, so they are one trial, not several) with its 95 % Wilson interval, overall and per
precision, and apart from it how often a seed's kernel (or precision) variants agree on the stall
(McNemar's exact test on the pairs that disagree). ``--compare OTHER_DIR`` sets this folder's runs
(the recipe) against another's (the remedy), by seed and per precision: both rates, Fisher's exact
p; on the seeds both trained, McNemar's exact test (paired); the steps to the headline with the runs
that missed it censored (Kaplan-Meier, log-rank); the headline among the runs that formed routing
(``comparison_with_<OTHER>.json``):

    python experiments/stall_rate.py --out experiments/results/stall_rate/fp32 --table \\
        --compare experiments/results/stall_rate/remedy_lr_x3
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pandas as pd

from compose_lens.core import stats
from compose_lens.training.outcome import classify_run

KERNELS = {"native": {}, "default": {"ATEN_CPU_CAPABILITY": "default"},
           "avx2": {"ATEN_CPU_CAPABILITY": "avx2"}}


def seeds_of(specs: list[str]) -> list[int]:
    out = []
    for spec in specs:
        lo, _, hi = spec.partition("-")
        out += list(range(int(lo), int(hi or lo) + 1))
    return out


def run_name(seed: int, kernel: str, threads: int, precision: str, compile_: str, remedy: str,
             device: str = "cpu") -> str:
    name = f"seed={seed}_kernel={kernel}_threads={threads}_{precision}"
    if device != "cpu":
        name += f"_{device.replace(':', '')}"
    if compile_ == "on":
        name += "_compiled"
    if remedy != "none":
        name += f"_remedy={remedy}"
    return name


def run_sets(seed: int, threads: int, precision: str, compile_: str, remedy: str, steps: int, device: str,
             stop_at: str) -> list[str]:
    """The ``--set`` assignments of one trajectory (its seed sets split, initial weights and data order)."""
    sets = [f"seed={seed}", f"init_seed={seed}", f"train.seed={seed}", f"threads={threads}",
            f"precision={precision}", f"compile={compile_}", f"stop_at={stop_at}", f"device={device}",
            "checkpoint_every=2500", "pool_size=1000", f"steps={steps}"]
    return sets + ([f"remedy={remedy}"] if remedy != "none" else [])


def train_one(out: Path, seed: int, kernel: str, threads: int, precision: str, compile_: str,
              remedy: str, steps: int, device: str = "cpu", stop_at: str = "generalised") -> str:
    run = out / "runs" / run_name(seed, kernel, threads, precision, compile_, remedy, device)
    if (run / "results.json").exists():
        return f"{run.name}: done already"
    sets = run_sets(seed, threads, precision, compile_, remedy, steps, device, stop_at)
    cmd = [sys.executable, "-m", "compose_lens.cli", "train", "--out", str(run), "--quiet"]
    for s in sets:
        cmd += ["--set", s]
    if (run / "resume.safetensors").exists() or (run / "config.json").exists():
        cmd = [sys.executable, "-m", "compose_lens.cli", "train", "--out", str(run), "--resume", "--quiet"]
    env = {**os.environ, **KERNELS[kernel], "OMP_NUM_THREADS": str(threads)}
    started = time.perf_counter()
    proc = subprocess.run(cmd, env=env, capture_output=True, text=True)
    took = time.perf_counter() - started
    if proc.returncode != 0:
        return f"{run.name}: FAILED ({proc.returncode}) {proc.stderr.strip().splitlines()[-1:]}"
    row = classify_run(run)
    return f"{run.name}: {row['outcome']} at step {row['steps']} ({took:.0f} s)"


def train_stack(out: Path, seeds: list[int], kernel: str, threads: int, precision: str, remedy: str, steps: int,
                stop_at: str) -> list[str]:
    """The seeds' trajectories trained together in one process (:class:`compose_lens.training.batched.BatchedTrainer`,
    through :func:`compose_lens.sweep.train_points`): each run keeps its own directory, which resumes alone
    or stacked, and writes what it would write alone to float rounding (tests/integration/test_batched.py)."""
    from compose_lens.core.config import RunConfig
    from compose_lens.core.errors import ComposeLensError
    from compose_lens.sweep import train_points_in_process

    runs = [out / "runs" / run_name(s, kernel, threads, precision, "off", remedy) for s in seeds]
    todo = [(s, r) for s, r in zip(seeds, runs) if not (r / "results.json").exists()]
    lines = [f"{r.name}: done already" for r in runs if (r / "results.json").exists()]
    if not todo:
        return lines
    configs = [RunConfig().with_overrides(run_sets(s, threads, precision, "off", remedy, steps, "cpu", stop_at)).to_dict()
               for s, _ in todo]
    started = time.perf_counter()
    try:  # a fresh process, so that the kernel setting (ATEN_CPU_CAPABILITY) is read before torch starts
        outcomes = train_points_in_process(configs, [str(r) for _, r in todo], threads,
                                           {**KERNELS[kernel], "OMP_NUM_THREADS": str(threads)})
    except ComposeLensError as exc:
        return lines + [f"stack {todo[0][0]}-{todo[-1][0]}: FAILED {exc}"]
    took = time.perf_counter() - started
    for (_, run), o in zip(todo, outcomes):
        if o["status"] != "done":
            lines.append(f"{run.name}: FAILED {o['error']}")
            continue
        row = classify_run(run)
        # what the run says it was trained with: a stack that could not be set up (too little memory, say)
        # trains its runs one by one (compose_lens.sweep.train_points), and the line must say so
        stacked = json.loads((run / "results.json").read_text()).get("stacked", 1)
        how = f"stacked with {stacked - 1} other(s)" if stacked > 1 else "trained alone: the stack could not be set up"
        lines.append(f"{run.name}: {row['outcome']} at step {row['steps']} ({how}; {took:.0f} s for the stack)")
    return lines


# A seed's trajectories differ in rounding alone (kernels, threads, compile, device) or in precision; the
# rate counts each seed once, by this rule, fixed before any outcome is read: native kernels first, then
# fp32, the CPU, uncompiled, one thread; among equals the first run by name.
ONE_PER_SEED = (("kernel", "native"), ("precision", "fp32"), ("device", "cpu"), ("compiled", False), ("threads", 1))
RULE = ("one trajectory per seed: native kernels first, then fp32, CPU, uncompiled, one thread, then the "
        "first by run name; a seed whose chosen run is still undecided (unfinished, routing not formed, "
        "stall not yet certain) is left out and listed")


def run_row(run: Path) -> dict:
    """One run directory's row: its setting, outcome, and whether that outcome is decided.

    A finished run is decided. So is an unfinished one whose routing formed (a stall is routing never
    forming, so it can no longer stall) or whose outcome already reads stalled or diverged."""
    cfg = json.loads((run / "config.json").read_text())
    res = json.loads((run / "results.json").read_text()) if (run / "results.json").exists() else {}
    row = classify_run(run)
    finished = bool(res)
    exhaustive = res.get("exhaustive", {})
    return {
        "run": run.name, "seed": cfg["train"]["seed"], "f": cfg["task"]["f"], "r": cfg["task"]["r"],
        "precision": cfg["train"]["precision"].replace("auto", "fp32"),
        "threads": res.get("threads", cfg["train"].get("threads")), "kernel": run.name.split("kernel=")[1].split("_")[0],
        "device": cfg["train"]["device"],
        "compiled": res.get("compiled", cfg["train"].get("compile") == "on"), "remedy": cfg["train"].get("remedy", "none"),
        "steps": row["steps"], "outcome": row["outcome"], "finished": finished,
        "decided": finished or row["routing_formed_step"] is not None or row["outcome"] in ("stalled", "diverged"),
        "routing_formed_step": row["routing_formed_step"],
        "zero_var_heldout": exhaustive.get("zero_var_heldout", {}).get("accuracy"),
        "two_var_union": exhaustive.get("two_var_union", {}).get("accuracy"),
        "1var_train_final": row["final_1var_train"],
        "train_wall_time_s": res.get("train_wall_time_s"),
    }


def read_runs(out: Path) -> pd.DataFrame:
    """One row per run directory with a logged evaluation (finished or not), sorted by name."""
    rows = [run_row(run) for run in sorted((out / "runs").glob("*"))
            if (run / "config.json").exists() and (run / "metrics.jsonl").exists()
            and (run / "metrics.jsonl").stat().st_size]
    return pd.DataFrame(rows)


def rate_by_seed(runs: pd.DataFrame) -> dict:
    """The stall rate over seeds (:data:`ONE_PER_SEED`), its Wilson interval, and the seeds left out."""
    chosen = stats.one_per_seed(runs, ONE_PER_SEED)
    decided = chosen[chosen["decided"]]
    rate = stats.Rate.of(int((decided["outcome"] == "stalled").sum()), len(decided))
    return {"seeds": rate.n, "stalled": rate.k, "stall_fraction": rate.fraction, "interval_95": [rate.low, rate.high],
            "generalised": int((decided["outcome"] == "generalised").sum()),
            "stalled_seeds": sorted(int(s) for s in decided.loc[decided["outcome"] == "stalled", "seed"]),
            "undecided_seeds": sorted(int(s) for s in chosen.loc[~chosen["decided"], "seed"]),
            "runs_chosen": sorted(chosen.loc[chosen["decided"], "run"])}


def rate_from_table(runs_csv: Path, precision: str | None = None) -> dict:
    """:func:`rate_by_seed` of a folder's committed ``runs.csv`` (what ``--table`` wrote), optionally of one
    precision: the one reading that ``make reproduce`` and the docs' claims (docs/claims/) quote."""
    runs = pd.read_csv(runs_csv)
    if precision:
        runs = runs[runs["precision"] == precision]
    return rate_by_seed(runs)


def summarise(runs: pd.DataFrame) -> dict:
    """summary.json: the rate by seed (over all runs and per precision) and, apart, how often the
    variants of one seed (kernels; precisions) reach the same stall outcome."""
    decided = runs[runs["decided"]].assign(stalled=lambda d: d["outcome"] == "stalled")
    by_seed = {"all": rate_by_seed(runs)}
    for precision, group in runs.groupby("precision"):
        by_seed[f"precision={precision}"] = rate_by_seed(group)
    paired = []
    for precision, group in decided.groupby("precision"):  # native against each other kernel a seed ran on
        for kernel in sorted(set(group["kernel"]) - {"native"}):
            paired.append({"precision": precision, **stats.paired_agreement(group, "kernel", "native", kernel, "stalled")})
    native = decided[decided["kernel"] == "native"]
    if native["precision"].nunique() > 1:
        paired.append({"kernel": "native", **stats.paired_agreement(native, "precision", "fp32", "bf16", "stalled")})
    return {"rule": RULE, "by_seed": by_seed, "paired_variants": paired,
            "trajectories": {"runs": len(runs), "finished": int(runs["finished"].sum()),
                             "decided": int(runs["decided"].sum()),
                             "stalled": int((decided["outcome"] == "stalled").sum())}}


def table(out: Path) -> pd.DataFrame:
    """Re-read ``out``'s run directories; write ``runs.csv`` (one row per run) and ``summary.json``."""
    df = read_runs(out)
    if df.empty:
        return df
    df.to_csv(out / "runs.csv", index=False)
    (out / "summary.json").write_text(json.dumps(summarise(df), indent=2) + "\n")
    return df


def compare(recipe: pd.DataFrame, other: pd.DataFrame) -> dict:
    """The recipe's runs against another set's (the remedy's), per precision both have, each counted by
    seed: both rates with their intervals and Fisher's exact p; on the seeds both sets trained (the
    remedy was trained on the recipe's seeds), McNemar's exact test for the stall and for the headline
    (``paired``: the pairs are not independent samples); the steps to the headline with every run that
    did not reach it censored at its last step (``time_to_headline``: Kaplan-Meier medians, log-rank);
    and among the runs that formed routing, how many reached the headline (``routed``, Fisher)."""
    found = {"rule": RULE}
    for precision in sorted(set(recipe["precision"]) & set(other["precision"])):
        a = rate_by_seed(recipe[recipe["precision"] == precision])
        b = rate_by_seed(other[other["precision"] == precision])
        chosen = [d[d["run"].isin(c["runs_chosen"])].assign(stalled=lambda d: d["outcome"] == "stalled",
                                                             generalised=lambda d: d["outcome"] == "generalised")
                  for d, c in ((recipe, a), (other, b))]
        both = pd.concat([chosen[0].assign(set="recipe"), chosen[1].assign(set="other")])
        row = {"recipe": {k: a[k] for k in ("seeds", "stalled", "generalised", "interval_95")},
               "other": {k: b[k] for k in ("seeds", "stalled", "generalised", "interval_95")},
               "fisher_exact_p": stats.compare_rates(a["stalled"], a["seeds"], b["stalled"], b["seeds"])["p_value"],
               "common_seeds": len(set(map(int, chosen[0]["seed"])) & set(map(int, chosen[1]["seed"]))),
               "paired": {k: stats.paired_agreement(both, "set", "recipe", "other", k) for k in ("stalled", "generalised")},
               "time_to_headline": stats.compare_times(chosen[0]["steps"], chosen[0]["generalised"],
                                                       chosen[1]["steps"], chosen[1]["generalised"])}
        routed = [d[d["routing_formed_step"].notna()] for d in chosen]
        row["routed"] = {"recipe": [int(routed[0]["generalised"].sum()), len(routed[0])],
                         "other": [int(routed[1]["generalised"].sum()), len(routed[1])],
                         "fisher_exact_p": stats.compare_rates(int(routed[0]["generalised"].sum()), len(routed[0]),
                                                               int(routed[1]["generalised"].sum()), len(routed[1]))["p_value"]}
        found[f"precision={precision}"] = row
    return found


def compare_lines(found: dict, names: tuple[str, str]) -> list[str]:
    lines = []
    for key, row in found.items():
        if key == "rule":
            continue
        parts = []
        for side, name in zip(("recipe", "other"), names):
            r = row[side]
            rate = stats.Rate.of(r["stalled"], r["seeds"])
            parts.append(f"{name} {rate.text()}")
        lines.append(f"{key}: stalled seeds {'; '.join(parts)}; Fisher exact p = {row['fisher_exact_p']:.2g}")
        for what, pair in row["paired"].items():
            lines.append(f"  paired, on the {pair['seeds']} seeds both trained: {what} under {names[0]} only "
                         f"{pair['only_a']}, under {names[1]} only {pair['only_b']}, McNemar exact p = "
                         f"{pair['mcnemar_exact_p']:.2g}")
        t = row["time_to_headline"]
        medians = [f"{m:.0f}" if m is not None else "not reached" for m in (t["median_a"], t["median_b"])]
        lines.append(f"  steps to the headline, runs that missed it censored: reached {t['reached_a']} of {t['n_a']} "
                     f"and {t['reached_b']} of {t['n_b']}, Kaplan-Meier median {medians[0]} vs {medians[1]}, "
                     f"log-rank p = {t['p_value']:.2g}")
        r = row["routed"]
        lines.append(f"  of the runs that formed routing, reached the headline: {r['recipe'][0]} of {r['recipe'][1]} vs "
                     f"{r['other'][0]} of {r['other'][1]}, Fisher exact p = {r['fisher_exact_p']:.2g}")
    return lines


def choose(a: argparse.Namespace, n_seeds: int) -> None:
    """Resolve ``--stack auto`` / ``--precision auto`` by :func:`compose_lens.training.batched.probe` on the study's
    setting, and record the probe in ``<out>/probe.json`` (each run's ``results.json`` says how many runs it
    was stacked with, its ``config.json`` its precision)."""
    if a.device != "cpu" or a.compile != "off":  # stacking is for the CPU, uncompiled: one run a process
        a.stack, a.precision = "1" if a.stack == "auto" else a.stack, "fp32" if a.precision == "auto" else a.precision
        return
    from compose_lens.training.batched import probe
    from compose_lens.core.config import RunConfig

    ks = [k for k in (1, 4, 8, 16) if k <= n_seeds] if a.stack == "auto" else [int(a.stack)]
    precisions = None if a.precision == "auto" else [a.precision]
    found = probe(RunConfig().with_overrides([f"threads={a.threads}"]), ks, precisions)
    a.stack, a.precision = str(found["runs_per_process"]), found["precision"]
    a.out.mkdir(parents=True, exist_ok=True)
    (a.out / "probe.json").write_text(json.dumps(found, indent=1) + "\n")
    print(f"probe: {a.precision}, {a.stack} seed(s) a process ({found['processor']['name']})", flush=True)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--out", required=True, type=Path)
    p.add_argument("--seeds", nargs="*", default=["100-111"], help="seeds or ranges (100-111)")
    p.add_argument("--kernels", nargs="*", default=["native", "default"], choices=sorted(KERNELS))
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--precision", default="fp32", choices=["fp32", "bf16", "auto"],
                   help="auto: the one a short probe of this CPU finds fastest (bf16 only where it has bf16 units)")
    p.add_argument("--compile", default="off", choices=["off", "on"])
    p.add_argument("--remedy", default="none")
    p.add_argument("--steps", type=int, default=30_000)
    p.add_argument("--workers", type=int, default=2)
    p.add_argument("--stack", default="auto", metavar="K",
                   help="train up to K seeds together in one process per worker (batched; the CPU only, "
                        "compile off); auto (default): the K a short probe of this CPU finds fastest")
    p.add_argument("--device", default="cpu", help="cpu or cuda (the GPU check trains there)")
    p.add_argument("--stop-at", default="generalised", choices=["generalised", "decided"],
                   help="generalised: stalls train the whole budget (the study here); decided: also stop "
                        "once the detector is certain of a stall")
    p.add_argument("--table", action="store_true", help="only re-read the run directories")
    p.add_argument("--compare", type=Path, metavar="OTHER_DIR",
                   help="after --table: compare these runs (the recipe) with OTHER_DIR's (e.g. the remedy), by seed")
    a = p.parse_args(argv)

    def refuse(line: str) -> int:  # bad input: one line, exit 2, nothing trained or tabled
        print(f"stall_rate: error: {line}", file=sys.stderr)
        return 2

    if a.out.exists() and not a.out.is_dir():
        return refuse(f"--out {a.out}: is a file, not a folder; name the folder of the runs")
    if a.compare is not None and not (a.compare / "runs").is_dir():
        return refuse(f"--compare {a.compare}: no runs/ folder there; give a stall_rate.py --out folder")
    if a.table and not (a.out / "runs").is_dir():
        return refuse(f"--out {a.out}: no runs/ folder there; train first (without --table)")
    if not a.table:
        try:
            seeds = seeds_of(a.seeds)
        except ValueError:
            return refuse(f"--seeds {' '.join(a.seeds)}: give whole numbers or ranges of them (100 or 100-111)")
        if not seeds:  # a range written high-low holds no seed: nothing would train, and nothing be said
            return refuse(f"--seeds {' '.join(a.seeds)}: no seed in it; write a range low-high (100-111)")
        if a.stack != "auto" and not a.stack.isdigit():
            return refuse(f"--stack {a.stack}: give a whole number of seeds (16), or auto")
        if min(a.workers, a.steps, a.threads, int(a.stack if a.stack != "auto" else 1)) < 1:
            return refuse(f"--workers {a.workers}, --steps {a.steps}, --threads {a.threads}, --stack {a.stack}: "
                          f"each must be at least 1")
        if a.stack not in ("auto", "1") and (a.device != "cpu" or a.compile != "off"):
            return refuse(f"--stack {a.stack}: stacked runs train on the CPU, uncompiled; drop --stack or "
                          f"--device/--compile")
        jobs = [(s, k) for s in seeds for k in a.kernels]
        # a run already there goes on (or is tabled) as it was trained: a changed budget or stop rule
        # would table the old run under the new settings, so it is refused before anything trains (or probes)
        precisions = ["fp32", "bf16"] if a.precision == "auto" else [a.precision]
        for s, k, precision in ((s, k, precision) for s, k in jobs for precision in precisions):
            run = a.out / "runs" / run_name(s, k, a.threads, precision, a.compile, a.remedy, a.device)
            if not (run / "config.json").exists():
                continue
            try:
                saved = json.loads((run / "config.json").read_text())["train"]
                trained = {"steps": int(saved["steps"]), "stop-at": saved.get("stop_at", "end")}
            except (OSError, ValueError, KeyError, TypeError):
                return refuse(f"{run}/config.json: not a compose-lens run's config; move the run away")
            for option, asked in (("steps", a.steps), ("stop-at", a.stop_at)):
                if trained[option] != asked:
                    return refuse(f"{run}: was trained with --{option} {trained[option]}, not {asked}; "
                                  f"use another --out for other settings (the table would mix the two)")
        if "auto" in (a.stack, a.precision):
            choose(a, len(seeds))
        a.stack = int(a.stack)
        if a.stack > 1:  # each task a stack of seeds in one process, or one seed's `compose-lens train`
            tasks = [(train_stack, (a.out, seeds[i:i + a.stack], k, a.threads, a.precision, a.remedy, a.steps,
                                    a.stop_at)) for k in a.kernels for i in range(0, len(seeds), a.stack)]
        else:
            tasks = [(lambda *args: [train_one(*args)], (a.out, s, k, a.threads, a.precision, a.compile, a.remedy,
                                                        a.steps, a.device, a.stop_at)) for s, k in jobs]
        with ThreadPoolExecutor(a.workers) as pool:
            futures = [pool.submit(fn, *args) for fn, args in tasks]
            for fut in futures:
                print("\n".join(fut.result()), flush=True)
                table(a.out)
    df = table(a.out)
    if not df.empty:
        print(df[["run", "steps", "outcome", "finished", "zero_var_heldout", "two_var_union"]].to_string(index=False))
        summary = json.loads((a.out / "summary.json").read_text())
        print(f"counted by seed ({summary['rule']}):")
        for key, r in summary["by_seed"].items():
            rate = stats.Rate.of(r["stalled"], r["seeds"])
            undecided = f"; undecided seeds {r['undecided_seeds']}" if r["undecided_seeds"] else ""
            print(f"  {key}: {rate.text()} stalled{undecided}")
        for p_ in summary["paired_variants"]:
            flips = stats.Rate.of(p_["seeds"] - p_["agree"], p_["seeds"]).text() if p_["seeds"] else "no pair"
            print(f"  {p_['variant']} {p_['a']} vs {p_['b']}: {p_['agree']} of {p_['seeds']} seeds agree on the stall "
                  f"({p_['only_a']} stalled only under {p_['a']}, {p_['only_b']} only under {p_['b']}; flipped "
                  f"{flips}; McNemar exact p = {p_['mcnemar_exact_p']:.2f})")
    if a.compare is not None:
        other = read_runs(a.compare)
        if df.empty or other.empty:
            print(f"error: nothing to compare: {a.out if df.empty else a.compare} has no run with a logged evaluation",
                  file=sys.stderr)
            return 2
        found = compare(df, other)
        (a.out / f"comparison_with_{a.compare.name}.json").write_text(json.dumps(found, indent=2) + "\n")
        for line in compare_lines(found, (a.out.name, a.compare.name)):
            print(line)
    return 0


if __name__ == "__main__":
    sys.exit(main())
