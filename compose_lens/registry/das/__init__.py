"""The ``das`` analysis: distributed alignment search for the variable-value binding, with its controls
(:mod:`.search`; minutes of fitting: its own command, not ``analyze``).
"""

from __future__ import annotations

from compose_lens.core.config import DAS_RANKS, DAS_SITES
from compose_lens.core.errors import ComposeLensError
from compose_lens.registry.analysis import Analysis, Option, Result


def _das(ctx: Context, settings: dict) -> Result:
    from compose_lens.registry.das.search import DasSettings, das_table
    from compose_lens.training.subject import with_bridge

    chosen = DasSettings(n_pairs=settings["n_pairs"], ranks=tuple(settings["ranks"]), sites=tuple(settings["sites"]),
                         epochs=settings["epochs"], arbitrary_control=not settings["no_arbitrary"], seed=ctx.seed)
    chosen.check(ctx.config.model.d_model)
    table, summary = das_table(with_bridge(ctx.loaded), chosen)  # TransformerLens's fit_das reads hooks
    return Result(tables={"das": table}, documents={"das": {"model": ctx.loaded.source, **summary}})


def _das_figures(ctx: Context, result: Result, settings: dict) -> list:
    from compose_lens.registry.das.figure import das_figure

    title = f"DAS for the variable-value binding: {result.documents['das']['model']}"
    return [("das", das_figure, (result.tables["das"], title), 120)]


def _das_lines(result: Result) -> list[str]:
    from compose_lens.registry.das.search import best_rows

    s = result.documents["das"]
    return [f"pairs: {s['pairs_kept']} of {s['pairs_drawn']} answered correctly (base and source); "
            f"{s['pairs_train']} train DAS, {s['pairs_test']} score it",
            best_rows(result.tables["das"]).to_string(index=False, float_format=lambda v: f"{v:.3f}")]


def _das_settings(settings: dict) -> None:
    if min(settings["ranks"]) < 1:
        raise ComposeLensError(f"--ranks {min(settings['ranks'])}: a subspace has at least 1 dimension")


def _das_memory(settings: dict, config) -> None:
    """A base and a source per pair, each run through the model with its hooks."""
    from compose_lens.data.safety import activation_bytes, check_sizes

    n = settings["n_pairs"]
    check_sizes(config, {f"--n-pairs {n}": (n, 2, 2 * activation_bytes(config, False))})


DAS = Analysis(
    name="das", title="Distributed alignment search for the variable-value binding", compute=_das,
    settings={"n_pairs": 600, "ranks": DAS_RANKS, "sites": DAS_SITES, "epochs": 15, "no_arbitrary": False},
    module="compose_lens.registry.das.search", tables=("das",), documents=("das",),
    figures=("das",), draw=_das_figures, causal=True, in_analyze=False,
    command="das", help="distributed alignment search for the variable-value binding, with its controls",
    options=(Option("--ranks", "ranks", "subspace ranks", many=True),
             Option("--sites", "sites", "where to search", choices=DAS_SITES, many=True),
             Option("--n-pairs", "n_pairs", "pairs drawn; those the model answers correctly are kept", minimum=30),
             Option("--epochs", "epochs", "DAS training epochs"),
             Option("--no-arbitrary", "no_arbitrary", "skip the arbitrary-label control (one more fit per site, "
                    "at the largest rank)")),
    guard=_das_memory, validate=_das_settings, describe=_das_lines,
    exports=("das_table", "binding_pairs", "DasSettings"))
