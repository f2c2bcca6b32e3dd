"""The ``attention_entropy`` analysis: each head's attention entropy at ``=`` by sequence kind (:mod:`.entropy`;
no figure: a table).
"""

from __future__ import annotations

from compose_lens.registry.analysis import Analysis, Option, Result


def _entropy(ctx: Context, settings: dict) -> Result:
    from compose_lens.registry.attention_entropy.entropy import attention_entropy, lowest

    table = attention_entropy(ctx.loaded, seed=ctx.seed, **settings)
    low = lowest(table)
    return Result(tables={"attention_entropy": table},
                  facts={"lowest_entropy_head_var2": f"blocks.{low['layer']} head {low['head']}" if low else None,
                         "lowest_entropy_var2": low.get("entropy")})


def _entropy_lines(result: Result) -> list[str]:
    table = result.tables["attention_entropy"]
    rows = table[table["kind"] != "all"]
    return [f"  blocks.{r.layer} head {r.head} on {r.kind}: {r.entropy:.2f} nats [{r.low:.2f}, {r.high:.2f}] "
            f"(log 2 = {r.log_2:.2f}, uniform = {r.log_n:.2f})" for r in rows.itertuples()]


def _entropy_section(inp, result: Result, settings: dict) -> str:
    from compose_lens.core.markup import html_table

    table = result.tables["attention_entropy"]
    rows = [[f"blocks.{r.layer} head {r.head}", r.kind, f"{r.entropy:.2f} [{r.low:.2f}, {r.high:.2f}]", r.n]
            for r in table.itertuples()]
    return (f"<p>Entropy (nats) of each head's attention from <code>=</code>, mean over {settings['pool_size']} "
            f"sequences of each pool with a 95 % bootstrap interval; log 2 = 0.69 (two positions), uniform over the "
            f"sequence = {table['log_n'].iloc[0]:.2f}.</p>" + html_table(rows, ["head", "kind", "entropy", "n"]))


ENTROPY = Analysis(
    name="attention_entropy", title="Attention entropy per head at =", compute=_entropy,
    settings={"pool_size": 200}, module="compose_lens.registry.attention_entropy.entropy", tables=("attention_entropy",),
    section=_entropy_section,
    command="entropy", help="attention entropy of every head at '=', by sequence kind",
    options=(Option("--pool-size", "pool_size", "sequences per pool (nine pools)"),),
    describe=_entropy_lines, exports=("attention_entropy",))
