"""Re-make experiments/results/methods/: DAS and the LLC on the paper model and the study's checkpoints.

    python experiments/methods.py                      # both (about 30 min on two busy cores)
    python experiments/methods.py --only das           # DAS on paper, step_5001, step_10001, final.pth
    python experiments/methods.py --only full          # the whole MLP2 input interchanged (das_full_interchange.csv)
    python experiments/methods.py --only llc           # LLC over the study's checkpoints, phases marked

Needs the study's checkpoints in ../shared/reference (see its README) and, for the LLC, devinterp
(``pip install -e '.[methods]'``). DAS runs with :data:`DAS_SETTINGS` (fewer pairs, epochs and
ranks than :class:`compose_lens.registry.das.search.DasSettings`), the LLC with :data:`LLC_SETTINGS`
(100 draws instead of 150); the LLC is estimated on a subset of the checkpoints (:data:`LLC_STEPS`,
denser around the phase onsets) to keep the run short. The phase onsets come from
``compose_lens.registry.dynamics.checkpoints`` (every checkpoint's pools, the rule of
:mod:`compose_lens.training.phases`), as ``compose-lens dynamics ../shared/reference`` gives them.
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

import pandas as pd
import torch

from compose_lens.registry.das import search as das
from compose_lens.registry.llc import estimate as llc
from compose_lens.registry.dynamics.checkpoints import trajectory
from compose_lens.training.phases import find_phases
from compose_lens.training.subject import load_model
from compose_lens.views.drawing import save
from compose_lens.registry.das.figure import das_figure
from compose_lens.registry.llc.figure import llc_figure

ROOT = Path(__file__).resolve().parent.parent
REFERENCE = ROOT.parent / "shared" / "reference"
DAS_MODELS = {"paper": "paper", "study_step_5001": str(REFERENCE / "step_5001.pth"),
              "study_step_10001": str(REFERENCE / "step_10001.pth"), "study_final": str(REFERENCE / "final.pth")}
# lighter than the library's defaults (600 pairs, 15 epochs, ranks 2 8 16 32), to fit a busy machine
DAS_SETTINGS = das.DasSettings(n_pairs=450, epochs=10, ranks=(4, 16, 32))
# lighter than the library's defaults (150 draws), and a subset of the checkpoints, denser near the onsets
LLC_SETTINGS = llc.LlcSettings(draws=100)
LLC_STEPS = (1, 1001, 2001, 3001, 3501, 4001, 4501, 5001, 5401, 6001, 8001, 12001, 16001, 20001, 30001)


def run_das(out: Path, names=None) -> None:
    for name, spec in DAS_MODELS.items():
        if names and name not in names:
            continue
        started = time.perf_counter()
        loaded = load_model(spec)
        table, summary = das.das_table(loaded, DAS_SETTINGS, progress=True)
        table.insert(0, "model", name)
        table.to_csv(out / f"das_{name}.csv", index=False)
        (out / f"das_{name}.json").write_text(json.dumps({"model": spec, **summary}, indent=2, default=str))
        save(das_figure(table, f"DAS for the variable-value binding: {name}")[0], None, out / f"das_{name}")
        print(f"{name}: {summary['pairs_kept']} of {summary['pairs_drawn']} pairs kept, "
              f"{time.perf_counter() - started:.0f} s")
        print(das.best_rows(table).to_string(index=False), flush=True)
    done = [out / f"das_{name}.csv" for name in DAS_MODELS if (out / f"das_{name}.csv").exists()]
    pd.concat([pd.read_csv(p) for p in done]).to_csv(out / "das_all.csv", index=False)


def run_full_interchange(out: Path) -> None:
    """The whole MLP2 input at '=' interchanged (the identity basis): whose answer does the model give?
    Scored on the same held-out pairs as DAS (DAS_SETTINGS' pairs, seed and split)."""
    rows = []
    site = next(s for s in das.SITES if s.name == "equals_before_mlp2")
    for name, spec in DAS_MODELS.items():
        loaded = load_model(spec)
        pairs = das.correct_pairs(loaded.model, das.binding_pairs(loaded.split, DAS_SETTINGS.n_pairs,
                                                                  DAS_SETTINGS.seed))
        order = torch.randperm(len(pairs), generator=torch.Generator().manual_seed(DAS_SETTINGS.seed))
        test = pairs.subset(order[int(round(DAS_SETTINGS.train_fraction * len(pairs))):])
        whole = torch.eye(loaded.config.model.d_model)
        rows.append({"model": name, "site": site.name, "pairs_test": len(test),
                     "gives_counterfactual": das.interchange_accuracy(loaded.model, site, whole, test)["iia"],
                     "gives_source_answer": das.interchange_accuracy(loaded.model, site, whole, test,
                                                                     test.source_label)["iia"]})
    table = pd.DataFrame(rows)
    table.to_csv(out / "das_full_interchange.csv", index=False)
    print(table.to_string(index=False))


def run_llc(out: Path) -> None:
    started = time.perf_counter()
    saved = out / "reference_phases.json"
    if saved.exists():  # made by an earlier run of this script (delete it to evaluate the checkpoints again)
        phases = json.loads(saved.read_text())
    else:
        phases = find_phases(trajectory(REFERENCE, circuit=False, progress=True).table)
        saved.write_text(json.dumps(phases, indent=2))
    print(f"phases: { {k: v['step'] for k, v in phases.items()} } ({time.perf_counter() - started:.0f} s)")
    settings = LLC_SETTINGS
    table, traces = llc.llc_over_checkpoints(REFERENCE, steps=LLC_STEPS, settings=settings, include_final=True,
                                             progress=True)
    table.to_csv(out / "llc_reference.csv", index=False)
    traces.to_csv(out / "llc_reference_traces.csv.gz", index=False)
    llc.phase_means(table, phases).to_csv(out / "llc_reference_by_phase.csv", index=False)
    (out / "llc_reference.json").write_text(json.dumps({"settings": llc.settings_dict(settings),
                                                        "steps": list(LLC_STEPS) + ["final.pth"]}, indent=2))
    save(llc_figure(table, phases, "local learning coefficient of the study's checkpoints")[0], None,
         out / "llc_reference")
    print(table[["step", "llc_mean", "llc_std", "train_loss", "problems"]].to_string(index=False))
    print(f"LLC: {time.perf_counter() - started:.0f} s")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--out", default=str(ROOT / "experiments" / "results" / "methods"))
    parser.add_argument("--only", choices=("das", "full", "llc"))
    parser.add_argument("--models", nargs="+", choices=list(DAS_MODELS), help="DAS on these models only")
    args = parser.parse_args()
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    torch.set_num_threads(1)
    if args.only in (None, "das"):
        run_das(out, args.models)
    if args.only in (None, "das", "full"):
        run_full_interchange(out)
    if args.only in (None, "llc"):
        run_llc(out)


if __name__ == "__main__":
    main()
