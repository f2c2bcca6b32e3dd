"""The ``circuit`` analysis, whole in this folder: circuit discovery on the edge graph (EAP, EAP-IG, ACDC, exact).

``discovery.py`` holds the numbers (modularity reads them too), ``figure.py`` the graph's PNG, ``page.py`` its
offline page, ``test_*.py`` the tests; this module how the command, ``analyze``, the report and the API run it.
"""

from __future__ import annotations

from compose_lens.core.config import CIRCUIT_METHODS, PATCH_METRICS
from compose_lens.core.errors import ComposeLensError
from compose_lens.registry.analysis import Analysis, Option, Result

CIRCUIT_PAIRS = ("resample", "mixed")  # discovery.PAIRS


def _circuit(ctx: Context, settings: dict) -> Result:
    from compose_lens.registry.circuit.discovery import discover
    from compose_lens.core.files import json_safe

    s = settings
    kind, pairs = (s["pairs"], None) if s["pairs"] in CIRCUIT_PAIRS else ("resample", s["pairs"])
    if pairs is not None:  # read here: the summary counts the file's pairs
        from compose_lens.data.pairs import as_prompt_pairs

        pairs = as_prompt_pairs(ctx.split.task, pairs, ctx.loaded.declaration)  # your ids, where they are ids
    found = discover(ctx.loaded, s["method"], s["n_pairs"], ctx.seed, kind, s["positions"],
                     s["target"], s["threshold"], pairs=pairs, metric=s["metric"])
    recovered = found.pools["recovered"].min() if "recovered" in found.pools else None  # no pool has two answers
    summary = json_safe({**found.summary, "title": found.title, "pairs": str(s["pairs"]),
                         "n_pairs": s["n_pairs"] if pairs is None else len(pairs),
                         "min_pool_recovered": None if recovered is None else float(recovered)})
    return Result(tables={"circuit": found.edges, "circuit_pools": found.pools}, documents={"circuit": summary})


def _circuit_figures(ctx: Context, result: Result, settings: dict) -> list:
    """The graph as a PNG and as an interactive page (hover, slider), whose view the report's section folds in."""
    from compose_lens.registry.circuit.figure import circuit_figure
    from compose_lens.registry.circuit.page import circuit_page

    s = result.documents["circuit"]
    shown = (result.tables["circuit"], s["title"], s["metric"])
    return [("circuit", circuit_figure, shown, 120), ("circuit.html", circuit_page, shown, None)]


def _circuit_lines(result: Result) -> list[str]:
    from compose_lens.core.stats import format_estimate

    s = result.documents["circuit"]
    auc = "" if s["roc_auc"] is None else (
        f", ROC-AUC {format_estimate(s['roc_auc'], *(s.get('roc_auc_ci95') or [None, None]))} (95 % bootstrap "
        f"over the edges; {s['labelled_edges'][0]} labelled, {s['labelled_edges'][1]} not) against {s['labelled']}")
    ci = s.get("circuit_edges_ci95")
    size_ci = "" if ci is None else f" [{ci[0]}, {ci[1]}] (95 % bootstrap over the pairs)"
    lines = [f"  {s['method']}: {s['circuit_edges']}{size_ci} of {s['edges']} edges in the circuit{auc}"]
    if s["roc_auc"] is None:
        lines.append(f"  not scored against a circuit: {s['labelled']} (inconclusive)")
    if s["min_pool_recovered"] is None:
        lines.append("  circuit_pools.csv is empty: no evaluation pool of this split has prompts with two different "
                     "answers, so the circuit could not be checked on the pools")
    return lines


def _circuit_section(inp, result: Result, settings: dict) -> str:
    """The found circuit, scored against the labelled one, and its faithfulness on every pool."""
    import html

    from compose_lens.core.markup import html_table
    from compose_lens.core.stats import format_estimate

    s, pools = result.documents["circuit"], result.tables["circuit_pools"]
    against = "the paper's labelled circuit" if s["labelled"] == "the paper's circuit" else s["labelled"]
    auc = (f"; not scored against a circuit, {html.escape(against)}" if s["roc_auc"] is None
           else f"; ROC-AUC against {html.escape(against)} "
                f"{format_estimate(s['roc_auc'], *(s.get('roc_auc_ci95') or [None, None]))} (95 % bootstrap over "
                f"the {s['edges']} edges)")
    ci = s.get("circuit_edges_ci95")
    size = (f"{s['circuit_edges']}" if ci is None else
            f"{s['circuit_edges']} (every bootstrap resample of the pairs needs the same {ci[0]}, the ranking of "
            f"the edges held)" if ci[0] == ci[1] else f"{s['circuit_edges']} [{ci[0]}, {ci[1]}] (95 % bootstrap over "
            f"the pairs, the ranking of the edges held)")
    rows = pools[["pool", "n_pairs", "recovered"]].values.tolist() if "pool" in pools else []
    rows = [[pool, int(n), recovered] for pool, n, recovered in rows]
    return (f"<p>Edge attribution patching with integrated gradients on {settings['pairs']} pairs: "
            f"{size} of {s['edges']} edges recover {settings['target']:.0%} of the clean-vs-corrupted "
            f"logit difference{auc} ({s['seconds']:.1f} s). <code>compose-lens circuit</code> runs the other "
            f"methods (exact path patching, EAP, EAP-IG on the inputs, ACDC).</p>"
            + inp.report.figure(result.figure("circuit"), "circuit",
                                "The found circuit: components in forward order, each edge coloured by "
                                "its |score| (colour bar), solid if in the circuit, grey dashed if not; "
                                "attention takes its q, k and v inputs at three ports on its left edge.")
            + "<details><summary>The same graph to explore: hover an edge or a component for its score, the "
              "slider hides the edges below a |score| (<code>figures/circuit.html</code> of "
              f"<code>compose-lens circuit</code>)</summary>{result.figure('circuit.html')[1]}</details>"
            + (html_table(rows, ["pool", "prompt pairs", "share of the metric the circuit recovers (mean over the "
                                 "pairs)"]) if rows else ""))


def _circuit_settings(settings: dict) -> None:
    if not 0 < settings["target"] <= 1:
        raise ComposeLensError(f"--target {settings['target']}: give a share in (0, 1]")
    if not 0 <= settings["threshold"] < 1:
        raise ComposeLensError(f"--threshold {settings['threshold']}: give a share in [0, 1)")
    if settings["metric"] == "accuracy" and settings["method"] in ("eap", "eap-ig", "eap-ig-inputs"):
        raise ComposeLensError(f"--metric accuracy has no gradient, which {settings['method']} follows; use "
                               f"--method exact or acdc with it, or --metric logit_diff or prob")


def circuit_memory(settings: dict, config) -> None:
    """Per pair up to five prompts rendered (``mixed``'s variable corruption draws four, ``resample`` a
    pool and its partners); kept: every node's clean and corrupted output (the baseline the masked runs
    patch from), and one forward over all pairs with its activations, the masks and their gradient (R, E)
    for EAP / EAP-IG. (The pools' check, 4,500 prompts whatever ``--n-pairs``, is a few MB: left out.)"""
    from compose_lens.data.safety import activation_bytes, check_sizes

    m, n = config.model, settings["n_pairs"]
    nodes = 1 + m.n_layers * (m.n_heads + 1)  # the embeddings, every head and every MLP
    edges = nodes ** 2 * (m.n_ctx if settings["positions"] else 1)  # more than the graph has
    kept = 2 * 4 * m.n_ctx * m.d_model * nodes + activation_bytes(config, training=True) + 8 * edges
    check_sizes(config, {f"--n-pairs {n}": (n, 5, kept)})


CIRCUIT = Analysis(
    name="circuit", title="Circuit discovery (EAP-IG) against the known circuit", compute=_circuit,
    settings={"method": "eap-ig", "n_pairs": 300, "pairs": "resample", "metric": "logit_diff", "positions": False,
              "target": 0.95, "threshold": 0.01},
    module="compose_lens.registry.circuit.discovery", tables=("circuit", "circuit_pools"), documents=("circuit",),
    causal=True, figures=("circuit",), draw=_circuit_figures, section=_circuit_section, anchor="circuit-discovery",
    command="circuit", help="automatic circuit discovery (exact, EAP, EAP-IG, ACDC)",
    options=(Option("--method", "method", "how edges are scored", choices=CIRCUIT_METHODS),
             Option("--n-pairs", "n_pairs", "clean/corrupted prompt pairs", minimum=6),
             Option("--pairs", "pairs", "resample: another prompt of the same pool; mixed: the one-token "
                    "corruptions; or a CSV / JSONL file of your own clean,corrupted pairs (--n-pairs then unused)",
                    choices=CIRCUIT_PAIRS, pairs_file=True),
             Option("--metric", "metric", "what the edges are scored on: logit difference, probability or "
                    "accuracy of the clean answer (accuracy: exact and acdc only)", choices=PATCH_METRICS),
             Option("--positions", "positions", "split every edge by position"),
             Option("--threshold", "threshold", "ACDC's pruning threshold (share)"),
             Option("--target", "target", "performance the found circuit recovers")),
    guard=circuit_memory, validate=_circuit_settings, describe=_circuit_lines,
    exports=("discover_circuit=compose_lens.registry.circuit.discovery:discover",))
