"""Circuit discovery benchmark (issue #16): methods x (ROC-AUC vs the paper's circuit, with the
current labels and the first ones, Spearman vs exact path patching, circuit size at 95 % recovered,
time), on the paper model and the study's final checkpoint, on the 16-edge graph and the
121-edge position graph; then EAP-IG over the study's checkpoints.

Circuit size: ``size_pairs_95`` is the fewest top-|score| edges recovering 95 % on the scoring
pairs; ``size_pools_95`` the fewest recovering 95 % on every evaluation pool at once (the goal's
circuit; ACDC: its pruned graph, whose worst pool is ``worst_pool_recovered``).

    OMP_NUM_THREADS=1 PYTHONPATH=. python experiments/bench_circuit.py --threads 1 [--reference ../shared/reference]
"""

import argparse
from pathlib import Path

import pandas as pd
import torch

from compose_lens.registry.circuit import discovery as C
from compose_lens.training.subject import load_model

SETTINGS = (("resample", False), ("resample", True), ("mixed", False))


def bench(name, loaded, pairs_kind, positions, n_pairs=300, pool_size=300):
    gm = C.GraphModel.from_model(loaded.model, loaded.config.model, positions)
    pairs = C.PAIRS[pairs_kind](loaded.split, n_pairs)
    labels, first = C.paper_labels(gm.graph), C.paper_labels(gm.graph, constant_path=False)
    scores = {m: C.method_scores(gm, pairs, m) for m in C.METHODS}
    rows = []
    for m, (s, seconds) in scores.items():
        if m == "acdc":
            found = C.acdc(gm, pairs)[0]
            size_pairs = size_pools = int(found.sum())
        else:
            size_pairs, _ = C.size_at(gm, pairs, s)
            size_pools, _ = C.size_on_pools(gm, loaded.split, s, size=pool_size)
            found = C.top_k_circuits(s)[size_pools]
        pools = C.pool_faithfulness(gm, loaded.split, found, size=pool_size)
        rows.append({"model": name, "pairs": pairs_kind, "positions": positions, "method": m,
                     "edges": len(gm.graph), "labelled": int(labels.sum()), "roc_auc": C.roc_auc(s, labels),
                     "roc_auc_first_labels": C.roc_auc(s, first),
                     "spearman_vs_exact": C.spearman(s, scores["exact"][0]), "size_pairs_95": size_pairs,
                     "size_pools_95": size_pools, "share_pools_95": size_pools / len(gm.graph),
                     "worst_pool_recovered": pools["recovered"].min(), "seconds": seconds})
    return rows


def over_training(reference: Path, steps=(1001, 3001, 4501, 5401, 8001, 16001, 30001)):
    rows = []
    for step in steps:
        path = reference / f"step_{step}.pth"
        if not path.exists():
            continue
        loaded = load_model(path, reference / "split.json")
        gm = C.GraphModel.from_model(loaded.model, loaded.config.model)
        s = C.eap_ig_scores(gm, C.resample_pairs(loaded.split, 300))
        labels, first = C.paper_labels(gm.graph), C.paper_labels(gm.graph, constant_path=False)
        rows += [{"step": step, "edge": e.name, "eap_ig": float(v), "labelled": bool(lab),
                  "roc_auc": C.roc_auc(s, labels), "roc_auc_first_labels": C.roc_auc(s, first)}
                 for e, v, lab in zip(gm.graph.edges, s, labels)]
    return pd.DataFrame(rows)


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--reference", default="../shared/reference")
    parser.add_argument("--out", default="experiments/results/circuit")
    parser.add_argument("--threads", type=int, default=2)
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    ref = Path(args.reference)
    models = {"paper": load_model("paper")}
    if (ref / "final.pth").exists():
        models["final.pth"] = load_model(ref / "final.pth")
    rows = []
    for name, loaded in models.items():
        for pairs_kind, positions in SETTINGS:
            rows += bench(name, loaded, pairs_kind, positions)
            print(pd.DataFrame(rows[-len(C.METHODS):]).round(3).to_string(index=False), flush=True)
            pd.DataFrame(rows).to_csv(out / "methods.csv", index=False)
    if ref.exists():
        dyn = over_training(ref)
        dyn.to_csv(out / "over_training.csv", index=False)
        print(dyn.pivot(index="edge", columns="step", values="eap_ig").round(3).to_string())
        print(dyn.groupby("step")[["roc_auc", "roc_auc_first_labels"]].first().round(3).to_string())


if __name__ == "__main__":
    main()
