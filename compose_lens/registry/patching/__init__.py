"""The patching family: ``patch`` (whole components, by token role or position), ``patch-heads`` (a head's
q, k, v, pattern or output) and ``path-patch`` (a sender reaching one receiver only), with the prompt-pair
options they share; :mod:`.tables` holds the numbers, :mod:`.figure` the figures.
"""

from __future__ import annotations

from typing import Callable

from compose_lens.core.config import CORRUPTIONS, HEAD_COMPONENTS, PATCH_METRICS
from compose_lens.core.errors import ComposeLensError
from compose_lens.registry.analysis import Analysis, Option, Result


def _read_pairs(ctx: Context, settings: dict) -> dict:
    """``settings`` with its pairs file read, in the subject's declared coordinates
    (:func:`compose_lens.data.pairs.parse_tokens`)."""
    if not isinstance(settings.get("pairs"), str):
        return settings
    from compose_lens.data.pairs import as_prompt_pairs

    return {**settings, "pairs": as_prompt_pairs(ctx.split.task, settings["pairs"], ctx.loaded.declaration)}


def _patching(ctx: Context, settings: dict) -> Result:
    from compose_lens.registry.patching.tables import patching_table

    return Result(tables={"patching": patching_table(ctx.loaded, seed=ctx.seed, **_read_pairs(ctx, settings))})


def _drawn(stem: str, figure: str, title) -> Callable:
    """The ``draw`` of a patching command: ``figure.<figure>`` of its one table, titled ``title(table, settings)``."""
    def draw(ctx: Context, result: Result, settings: dict) -> list:
        from compose_lens.registry.patching import figure as figures

        table = result.tables[stem]
        return [(stem, getattr(figures, figure), (table, title(table, settings)), 120)]
    return draw


def _patching_title(table, settings: dict) -> str:
    metric = "" if settings["metric"] == "logit_diff" else f", metric {settings['metric']}"
    corruption, n_pairs = table["corruption"].iloc[0], int(table["n_pairs"].iloc[0])
    return f"activation patching, {corruption} corrupted ({n_pairs} pairs{metric})"


def _largest_sites(table, k: int):
    """The ``k`` sites that restore the most outside the residual stream (restoring the stream at the
    corrupted token restores the answer by construction)."""
    found = table[~table["component"].str.startswith("resid")]
    return found.loc[found["mean"].abs().nlargest(k).index]


def _patching_lines(result: Result) -> list[str]:
    table = result.tables["patching"]
    where = table["by"].iloc[0]  # role or position
    first = table.iloc[0]
    top = _largest_sites(table, 5)
    pairs = "from your pairs file" if first["corruption"] == "user" else f"({first['corruption']} corrupted)"
    return [f"  {len(table)} rows by {where}, {int(first['n_pairs'])} pairs {pairs}; "
            f"restored most, outside the residual stream (0: the corrupted answer, 1: the clean one):",
            *(f"    blocks.{int(r.block)} {r.component}{'' if int(r.head) < 0 else f' head {int(r.head)}'} at "
              f"{getattr(r, where)}: {r.mean:.3f} [{r.ci_low:.3f}, {r.ci_high:.3f}]" for r in top.itertuples())]


def _patching_memory(settings: dict, config, heads: bool = False) -> None:
    """Per pair: the clean and corrupted prompts (``variable`` draws four 1-var prompts per pair and
    keeps the corrupted copy); kept: every site's patched logit difference (float32) and its
    float64 gain and mask, the bootstrap's counts and draws, the role one-hots (whole components only),
    and (on the hook path) the clean prompt's cached activations. ``heads``: the sites are each head's
    q, k, v, pattern and z (``patch-heads``, ``path-patch``), not whole components."""
    from compose_lens.data.safety import check_sizes, kept_activation_bytes

    m, n = config.model, settings["n_pairs"]
    # tables.all_sites: five components and z per head, or every head's inputs and output
    sites = m.n_layers * m.n_ctx * (m.n_heads * len(HEAD_COMPONENTS) if heads else 5 + m.n_heads)
    roles = 0 if heads else 8 * m.n_ctx * 12  # 12: data.pairs.ROLES + VARIANT_ROLES, at most
    kept = 20 * sites + 16 * settings.get("n_boot", PATCHING.settings["n_boot"]) + roles + kept_activation_bytes(config)
    check_sizes(config, {f"--n-pairs {n}": (n, 5 if settings["corruption"] == "variable" else 2, kept)})


def _patching_settings(settings: dict) -> None:
    if settings["pairs"] is not None and settings["corruption"] != "value":
        raise ComposeLensError(f"--corruption {settings['corruption']} makes pairs and --pairs brings them; give one")


def _patching_section(inp, result: Result, settings: dict) -> str:
    import html

    from compose_lens.views.drawing import layer_name

    table, n_pairs = result.tables["patching"], settings["n_pairs"]
    found = "; ".join(f"{layer_name(int(r.block))} {r.component} at {r.role}: {r.mean:.2f}"
                      for r in _largest_sites(table, 3).itertuples())
    return (f"<p>The value assigned to the queried variable is corrupted; one activation at a time is restored "
            f"from the clean run ({n_pairs} prompt pairs). Positions are grouped by the role they play in each "
            f"prompt. Restored most, outside the residual stream: {html.escape(found)}.</p>"
            + inp.report.figure(result.figure("patching"), "patching", "Normalised logit difference (0: the "
                                "corrupted answer, 1: the clean one). Rows that are zero everywhere (the absent "
                                "layer-1 MLP) are left out; <code>compose-lens patch --by position</code> gives "
                                "absolute positions."))


# the prompt-pair options of every patching command (patch, patch-heads, path-patch)
PAIR_OPTIONS = (Option("--corruption", "corruption", "what the corrupted prompt changes", choices=CORRUPTIONS),
                Option("--n-pairs", "n_pairs", "clean/corrupted prompt pairs", minimum=2),
                Option("--pairs", "pairs", "a CSV / JSONL file of your own prompt pairs, columns clean and corrupted "
                       "(readable form or token ids); replaces --corruption and --n-pairs", pairs_file=True),
                Option("--metric", "metric", "logit difference of the two answers, probability or accuracy of the "
                       "clean answer", choices=PATCH_METRICS))
BY_OPTION = Option("--by", "by", "group positions by token role or keep absolute positions", choices=("role", "position"))

PATCHING = Analysis(
    name="patching", title="Activation patching by token role", compute=_patching,
    settings={"n_pairs": 1000, "n_boot": 1000, "corruption": "value", "by": "role", "pairs": None,
              "metric": "logit_diff"},
    module="compose_lens.registry.patching.tables", tables=("patching",), causal=True,
    figures=("patching",), draw=_drawn("patching", "patching_figure", _patching_title), section=_patching_section,
    command="patch", help="activation patching by component, layer and token role (or position)",
    options=(*PAIR_OPTIONS[:2], BY_OPTION, *PAIR_OPTIONS[2:]),
    guard=_patching_memory, validate=_patching_settings, describe=_patching_lines,
    exports=("patching_table", "TOKEN_ROLES=compose_lens.data.pairs:ROLES",
             "PATCHING_METRICS=compose_lens.analysis.metrics:METRICS", "patching_figure=compose_lens.registry.patching.figure"))


# -- patch-heads and path-patch: patching finer than a whole component -------------------------------

HEAD_INPUTS = ("q", "k", "v", "pattern")  # patch-heads' default components (z: the head's output, on request)
SHOWN_SITES, SMALL_EFFECT = 12, 0.005  # patch-heads prints at most this many sites, none moving it less


def _pairs_words(table, settings: dict) -> str:
    source = f" from {settings['pairs']}" if settings.get("pairs") else f", {table['corruption'].iloc[0]} corrupted"
    metric = "" if settings["metric"] == "logit_diff" else f", metric {settings['metric']}"
    return f"{int(table['n_pairs'].iloc[0])} pairs{source}{metric}"


def _head_patching(ctx: Context, settings: dict) -> Result:
    from compose_lens.registry.patching.tables import head_patching_table
    from compose_lens.training.subject import with_bridge

    chosen = {k: v for k, v in _read_pairs(ctx, settings).items() if k != "components"}
    table = head_patching_table(with_bridge(ctx.loaded), components=tuple(dict.fromkeys(settings["components"])),
                                seed=ctx.seed, n_boot=PATCHING.settings["n_boot"], **chosen)
    return Result(tables={"patching_heads": table}, value=settings)


def _estimate_lines(what: str, table, settings: dict, labels: list[str], rows=None) -> list[str]:
    """A heading, then each label beside its row's (of ``rows``, default ``table``) estimate and 95 % interval."""
    from compose_lens.core.stats import format_estimate
    from compose_lens.views.drawing import metric_words

    width = max(map(len, labels), default=0)
    return [f"{what} ({_pairs_words(table, settings)}); normalised {metric_words(settings.get('metric', 'logit_diff'))}"
            f", 0: corrupted, 1: clean, [95 % bootstrap interval]:",
            *(f"  {label.ljust(width)}  {format_estimate(r.mean, r.ci_low, r.ci_high)}"
              for label, r in zip(labels, (table if rows is None else rows).itertuples()))]


def _head_patching_lines(result: Result) -> list[str]:
    """The sites with the largest effects (at most :data:`SHOWN_SITES`, none below :data:`SMALL_EFFECT`)."""
    table, settings = result.tables["patching_heads"], result.value or {}
    top = table.loc[table["mean"].abs().sort_values(ascending=False, kind="stable").index[:SHOWN_SITES]]
    top = top[top["mean"].abs() >= SMALL_EFFECT]
    labels = [f"{r.component} of blocks.{r.block} head {r.head} at "
              + (r.role if "position" not in table or r.role != "context" else f"position {r.position}")
              for r in top.itertuples()]
    lines = _estimate_lines(f"per-head patching of {', '.join(dict.fromkeys(table['component']))}", table, settings,
                            labels, top)
    if top.empty:
        lines.append(f"  (no site moves it by {SMALL_EFFECT} or more)")
    elif len(table) > len(top):
        lines.append(f"  ({len(table) - len(top)} more rows in the CSV, each smaller)")
    return lines


HEAD_PATCHING = Analysis(
    name="patching_heads", title="Per-head patching of queries, keys, values and patterns", compute=_head_patching,
    settings={"components": HEAD_INPUTS, "by": "role", "corruption": "value", "n_pairs": 1000, "pairs": None,
              "metric": "logit_diff"},
    module="compose_lens.registry.patching.tables", tables=("patching_heads",),
    figures=("patching_heads",), causal=True, in_analyze=False,
    draw=_drawn("patching_heads", "patching_figure", lambda t, s: f"per-head patching ({_pairs_words(t, s)})"),
    command="patch-heads", help="per-head patching of queries, keys, values and attention patterns, by token role "
                                "or position",
    options=(Option("--component", "components", "a head's q, k, v, pattern (a destination's row) or z (its output)",
                    choices=HEAD_COMPONENTS, many=True),
             BY_OPTION, *PAIR_OPTIONS),
    guard=lambda settings, config: _patching_memory(settings, config, heads=True), validate=_patching_settings,
    describe=_head_patching_lines,
    exports=("head_patching_table",))


def _path_patching(ctx: Context, settings: dict) -> Result:
    from compose_lens.registry.patching.tables import path_patching
    from compose_lens.training.subject import with_bridge

    receivers = list(dict.fromkeys(settings["receivers"]))
    chosen = {k: v for k, v in _read_pairs(ctx, settings).items() if k not in ("sender", "receivers")}
    table = path_patching(with_bridge(ctx.loaded), sender=settings["sender"], receivers=receivers,
                          seed=ctx.seed, n_boot=PATCHING.settings["n_boot"], **chosen)
    return Result(tables={"path_patching": table}, value=settings)


def _path_patching_lines(result: Result) -> list[str]:
    table, settings = result.tables["path_patching"], result.value or {}
    labels = [f"{s} -> {r}" if r != "all" else f"{s} alone (every path)"
              for s, r in zip(table["sender"], table["receiver"])]
    return _estimate_lines("path patching", table, settings, labels)


def _path_names(settings: dict, config) -> None:
    """A sender or receiver the model cannot have, refused before it loads, and the memory guard."""
    from compose_lens.registry.patching.tables import check_path, path_end

    sender = path_end(settings["sender"], "sender", config.model)
    for receiver in settings["receivers"]:
        check_path(sender, path_end(receiver, "receiver", config.model))
    _patching_memory(settings, config, heads=True)


PATH_PATCHING = Analysis(
    name="path_patching", title="Path patching: a sender's output reaching one receiver only",
    compute=_path_patching,
    settings={"sender": "blocks.0.head0", "receivers": ("blocks.1.head0.q", "blocks.1.head0.k", "blocks.1.head0.v"),
              "corruption": "value", "n_pairs": 1000, "pairs": None, "metric": "logit_diff"},
    module="compose_lens.registry.patching.tables", tables=("path_patching",),
    figures=("path_patching",), causal=True, in_analyze=False,
    draw=_drawn("path_patching", "path_patching_figure",
                lambda t, s: f"path patching from {s['sender']} ({_pairs_words(t, s)})"),
    command="path-patch", help="path patching: a sender's output reaching one receiver only",
    options=(Option("--sender", "sender", "a head's output, blocks.L.headH, or an MLP's, blocks.L.mlp (blocks from 0)"),
             Option("--receiver", "receivers", "a later head's query, key or value, blocks.L.headH.q|k|v, or an "
                    "MLP's input, blocks.L.mlp", many=True), *PAIR_OPTIONS),
    guard=_path_names, validate=_patching_settings, describe=_path_patching_lines,
    exports=("path_patching", "path_patching_figure=compose_lens.registry.patching.figure"))
