"""The ``modularity`` analysis: is the model's circuit modular? :mod:`.measures` holds the three measures that
can fail and the verdict, and says how each is read; its tests are ``tests/unit/test_modularity.py`` (they
share ``test_locate.py``'s planted models). ``compose-lens modularity MODEL --out DIR`` writes
``modularity.csv`` (one row: every ``modularity_*`` column, the exhaustive accuracies and the located roles);
the report runs it too, ``analyze`` does not: its smallest-circuit search takes ~9 s on the paper model
(docs/speed.md's goal for ``analyze`` is 10 s).
"""

from __future__ import annotations

from compose_lens.registry.analysis import Analysis, Finding, Option, Result
from compose_lens.registry.circuit import circuit_memory


def _modularity(ctx, settings: dict) -> Result:
    import pandas as pd

    from compose_lens.registry.modularity import measures as modularity

    row = modularity.measure(ctx.loaded, ctx.seed, n_pairs=settings["n_pairs"],
                             same_mlp_n=settings["same_mlp_n"], pool_size=settings["pool_size"],
                             steps=settings["steps"])
    facts = {k: row[k] for k in ("modularity_separation", "modularity_same_adder", "modularity_circuit_fraction",
                                 "modularity_verdict")}
    return Result(tables={"modularity": pd.DataFrame([row])}, facts=facts)


def _shown(row, key: str, interval: bool = False) -> str:
    """A measure of the row (with its 95 % interval), or the word that says why there is none."""
    value = row[key]
    if not isinstance(value, float):
        return str(value)
    low, high = (row.get(f"{key}_low"), row.get(f"{key}_high")) if interval else (None, None)
    if isinstance(low, float) and f"{low:.3f}" == f"{high:.3f}" == f"{value:.3f}":  # not a zero-width interval
        return f"{value:.3f} (every bootstrap resample gives it)"
    return f"{value:.3f}" + (f" [{low:.3f}, {high:.3f}]" if isinstance(low, float) else "")


def _lines(result: Result) -> list[str]:
    row = result.tables["modularity"].iloc[0]
    shown = lambda key, interval=False: _shown(row, key, interval)  # noqa: E731
    edges = (f" ({row['modularity_circuit_edges']} of {row['modularity_graph_edges']} edges)"
             if isinstance(row["modularity_circuit_fraction"], float) else "")
    lines = [f"  separation (binding vs addition, 1 - overlap): {shown('modularity_separation', True)}",
             f"  one adder for constants and variables: {shown('modularity_same_adder')}",
             f"  circuit fraction: {shown('modularity_circuit_fraction', True)}{edges}",
             f"  verdict: {row['modularity_verdict']}"]
    if isinstance(row["modularity_reason"], str) and row["modularity_reason"]:
        lines.append(f"  why: {row['modularity_reason']}")
    return lines


def _section(inp, result: Result, settings: dict) -> str:
    import html

    from compose_lens.core.markup import html_table

    row = result.tables["modularity"].iloc[0]
    rows = [["(a) separation of binding and addition (1 - overlap)", _shown(row, "modularity_separation", True),
             "modular at >= 0.8"],
            ["(b) one adder for constants and variables", _shown(row, "modularity_same_adder"),
             "1: the same-MLP verdict is supported"],
            ["(c) share of the graph's edges the circuit needs", _shown(row, "modularity_circuit_fraction", True),
             "a size, compared, not thresholded"]]
    why = row["modularity_reason"]
    return (f"<p>Verdict: <b>{html.escape(str(row['modularity_verdict']))}</b> "
            f"({settings['n_pairs']} prompt pairs of each skill; intervals: 95 % bootstrap; "
            "<code>compose-lens modularity</code> writes the whole row).</p>"
            + html_table(rows, ["measure", "value [95 % interval]", "reads"])
            + (f'<p class="note">{html.escape(why)}</p>' if isinstance(why, str) and why else ""))


MODULARITY = Analysis(
    name="modularity", title="Modularity: separation, one adder, circuit size", compute=_modularity,
    settings={"n_pairs": 120, "same_mlp_n": 150, "pool_size": 200, "steps": 8},
    module="compose_lens.registry.modularity.measures", tables=("modularity",), causal=True, in_analyze=False,
    section=_section,
    findings=(Finding("modularity_separation", "binding and addition leave through distinct components",
                      "high (>= 0.8)", 0.8),
              Finding("modularity_same_adder", "one adder for constants and variables", "1", 1.0)),
    command="modularity", help="is the circuit modular? separation of binding and addition, one adder, circuit size",
    options=(Option("--n-pairs", "n_pairs", "prompt pairs of each skill (binding, addition)", minimum=6),
             Option("--same-mlp-n", "same_mlp_n", "prompts of each same-MLP test", minimum=10),
             Option("--pool-size", "pool_size", "prompts per pool for the circuit's faithfulness", minimum=9),
             Option("--steps", "steps", "EAP-IG's integration steps")),
    guard=lambda settings, config: circuit_memory({"n_pairs": settings["n_pairs"], "positions": True}, config),
    describe=_lines)
