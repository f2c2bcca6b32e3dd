"""Circuit discovery benchmark (issue #16): methods x (ROC-AUC vs the paper's circuit, Spearman vs
exact path patching, circuit size at 95 % recovered, worst pool recovered, time), on the paper model
and the study's final checkpoint, then EAP-IG over a few of the study's checkpoints.

    OMP_NUM_THREADS=2 PYTHONPATH=. python experiments/bench_circuit.py [--reference ../shared/reference]
"""

import argparse
import time
from pathlib import Path

import pandas as pd
import torch

from compose_lens.analysis import circuit as C
from compose_lens.runs import load_model


def bench(name, loaded, pairs_kind, positions, n_pairs=300):
    gm = C.GraphModel.from_model(loaded.model, loaded.config.model, positions)
    pairs = C.PAIRS[pairs_kind](loaded.split, n_pairs)
    labels = C.paper_labels(gm.graph)
    scores = {m: C.method_scores(gm, pairs, m) for m in C.METHODS}
    rows = []
    for m, (s, seconds) in scores.items():
        size, _ = C.size_at(gm, pairs, s)
        found = C.top_k_circuits(s)[size]
        pools = C.pool_faithfulness(gm, loaded.split, found)
        rows.append({"model": name, "pairs": pairs_kind, "positions": positions, "method": m,
                     "edges": len(gm.graph), "roc_auc": C.roc_auc(s, labels),
                     "spearman_vs_exact": C.spearman(s, scores["exact"][0]), "size_95": size,
                     "size_share": size / len(gm.graph), "worst_pool_recovered": pools["recovered"].min(),
                     "seconds": seconds})
    return rows


def over_training(reference: Path, steps=(3001, 4501, 5401, 8001, 16001, 30001)):
    rows = []
    for step in steps:
        path = reference / f"step_{step}.pth"
        if not path.exists():
            continue
        loaded = load_model(path, reference / "split.json")
        gm = C.GraphModel.from_model(loaded.model, loaded.config.model)
        s = C.eap_ig_scores(gm, C.resample_pairs(loaded.split, 300))
        rows += [{"step": step, "edge": e.name, "eap_ig": float(v)} for e, v in zip(gm.graph.edges, s)]
    return pd.DataFrame(rows)


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--reference", default="../shared/reference")
    parser.add_argument("--out", default="experiments/results/circuit")
    args = parser.parse_args()
    torch.set_num_threads(2)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    ref = Path(args.reference)
    models = {"paper": load_model("paper")}
    if (ref / "final.pth").exists():
        models["final.pth"] = load_model(ref / "final.pth")
    rows = []
    for name, loaded in models.items():
        for pairs_kind, positions in (("resample", False), ("mixed", False)):
            rows += bench(name, loaded, pairs_kind, positions)
            print(pd.DataFrame(rows[-4:]).round(3).to_string(index=False), flush=True)
    table = pd.DataFrame(rows)
    table.to_csv(out / "methods.csv", index=False)
    print(table.round(3).to_string(index=False))
    if ref.exists():
        dyn = over_training(ref)
        dyn.to_csv(out / "over_training.csv", index=False)
        print(dyn.pivot(index="edge", columns="step", values="eap_ig").round(3).to_string())


if __name__ == "__main__":
    main()
