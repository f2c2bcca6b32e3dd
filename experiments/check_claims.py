"""Docs that cannot drift from their data: every number in docs/claims/, checked twice.

    python experiments/check_claims.py                 # every claim: ok, or what is wrong
    python experiments/check_claims.py --claims FILE   # another claims table (a file, or a folder of them)
    python experiments/check_claims.py --coverage      # which numbers on the pages no claim checks

``docs/claims/<page>.toml`` (one file a page, ``everywhere.toml`` for what every page shares) lists the
page's claims, each a ``quote`` (the text as a page prints it), the page
(``doc``), the committed data it comes from (``source``, a path in the repository) and how
(``compute``: one of the registered computations below, with ``args``; ``template`` turns its
fields into text, e.g. ``"{stalled} of {seeds}"``). A claim holds when

1. the quote appears in the page as written (whitespace, such as a wrapped line, does not count),
2. and the template filled from the data gives exactly the quote: the number is what the data
   gives, rounded as quoted.

A page edited to a number its data does not give, or data recomputed under a quote that no longer
matches it, fails ``tests/unit/test_claims.py`` (run by ``make test``). A new claim is a new
``[[claim]]`` block; a new kind of computation is a function registered with :func:`computation`.

The table is read whole before any claim is checked (:func:`load`): a table that is not TOML or holds
no ``[[claim]]``, and every damaged claim (not a table, a key missing, unknown or of another type, a
page that is not there, an unknown computation, or a claim that checks nothing: an empty quote, or a
template that takes no field from the data) is one line on stderr naming the claim; the exit status is 2.
"""

from __future__ import annotations

import argparse
import json
import re
import string
import sys
from pathlib import Path
from typing import Callable

import pandas as pd

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from compose_lens.core import stats  # noqa: E402
from compose_lens.core.errors import ComposeLensError  # noqa: E402
from compose_lens.core.files import load_toml, not_there  # noqa: E402
from compose_lens.training.phases import measure_phases  # noqa: E402
from compose_lens.training.runs import read_metrics  # noqa: E402

CLAIMS = ROOT / "docs" / "claims"  # one <page>.toml a page: its [[claim]] and [[setting]] blocks
COMPUTATIONS: dict[str, Callable[..., dict]] = {}


def computation(fn: Callable[..., dict]) -> Callable[..., dict]:
    """Register ``fn(source: Path, **args) -> fields`` under its name."""
    COMPUTATIONS[fn.__name__] = fn
    return fn


def _script(name: str):
    import importlib.util

    spec = importlib.util.spec_from_file_location(name, ROOT / "experiments" / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


# -- the computations ------------------------------------------------------------------------------


@computation
def stall_rate(source: Path, precision: str | None = None, goal: float | None = None) -> dict:
    """The stall rate counted by seed, from a stall-rate folder's ``runs.csv`` (one run per seed by
    ``experiments/stall_rate.py``'s rule): stalled, seeds, fraction, low, high, half_width, and the seeds
    that reached the headline (generalised, generalised_fraction, generalised_low, generalised_high);
    with a ``goal`` half-width, the seeds a rate at this fraction needs for it (seeds_for_goal)."""
    found = _script("stall_rate").rate_from_table(source, precision)
    generalised = stats.Rate.of(found["generalised"], found["seeds"])
    low, high = found["interval_95"]
    fields = {"stalled": found["stalled"], "seeds": found["seeds"], "fraction": found["stall_fraction"],
              "low": low, "high": high, "half_width": (high - low) / 2,
              "generalised": generalised.k, "generalised_fraction": generalised.fraction,
              "generalised_low": generalised.low, "generalised_high": generalised.high}
    if goal is not None:
        fields["seeds_for_goal"] = stats.trials_for_half_width(found["stall_fraction"], goal)
    return fields


@computation
def stalled_ends(source: Path, flat_below: float = 0.7, look_back: int = 5000) -> dict:
    """How the stalled seeds of a stall-rate ``runs.csv`` end (one run per seed, ``stall_rate.py``'s rule):
    those whose 1-var training accuracy ends below ``flat_below`` (flat, with the ranges of that accuracy
    and of the 2-var union), and the others (late, their seeds, and their 1-var training accuracy
    ``look_back`` steps before the end and at it, from each run's committed ``metrics.jsonl``)."""
    script = _script("stall_rate")
    runs = stats.one_per_seed(pd.read_csv(source), script.ONE_PER_SEED)
    stalled = runs[runs["outcome"] == "stalled"]
    flat = stalled[stalled["1var_train_final"] < flat_below]
    late = stalled[stalled["1var_train_final"] >= flat_below].sort_values("seed")
    before = []
    for _, row in late.iterrows():
        log = read_metrics(source.parent / "runs" / row["run"])
        before.append(next(r["1var_train"] for r in log if r["step"] >= row["steps"] - look_back))
    return {"stalled": len(stalled), "flat": len(flat), "late": len(late),
            "flat_1var_low": flat["1var_train_final"].min(), "flat_1var_high": flat["1var_train_final"].max(),
            "flat_union_low": flat["two_var_union"].min(), "flat_union_high": flat["two_var_union"].max(),
            "late_seeds": " and ".join(str(s) for s in late["seed"]),
            "late_1var_before_high": max(before, default=float("nan")),
            "late_1var_low": late["1var_train_final"].min(), "late_1var_high": late["1var_train_final"].max(),
            "late_union_low": late["two_var_union"].min(), "late_union_high": late["two_var_union"].max()}


@computation
def seeds_by_outcome(source: Path) -> dict:
    """A stall-rate ``runs.csv``'s seeds (one run per seed, ``stall_rate.py``'s rule) as a table row's cells
    (``cells``): all seeds as ranges with their count, then for each of generalised, stalled and learning
    the count and the seeds (``2000-2003, 2007``), or 0."""
    runs = stats.one_per_seed(pd.read_csv(source), _script("stall_rate").ONE_PER_SEED)

    def ranges(seeds) -> str:
        seeds, spans = sorted(int(s) for s in seeds), []
        for s in seeds:
            if spans and s == spans[-1][1] + 1:
                spans[-1][1] = s
            else:
                spans.append([s, s])
        return ", ".join(str(a) if a == b else f"{a}-{b}" for a, b in spans)

    cells = [f"{ranges(runs['seed'])} ({len(runs)})"]
    for outcome in ("generalised", "stalled", "learning"):
        seeds = runs.loc[runs["outcome"] == outcome, "seed"]
        cells.append(f"{len(seeds)} ({ranges(seeds)})" if len(seeds) else "0")
    return {"cells": " | ".join(cells)}


@computation
def paired_variants(source: Path, variant: str, a: str, b: str, precision: str | None = None,
                    query: str | None = None) -> dict:
    """How often two variants of a seed agree on the stall (agree, seeds, only_a, only_b, p) and how often
    the variant flips it (flips, flip_fraction, flip_low, flip_high); ``query`` (pandas) picks the runs
    first (``kernel == 'native'``: a seed's other kernels are not its precision twin)."""
    runs = pd.read_csv(source)
    runs = runs[runs["decided"]].assign(stalled=lambda d: d["outcome"] == "stalled")
    if precision:
        runs = runs[runs["precision"] == precision]
    if query:
        runs = runs.query(query)
    found = stats.paired_agreement(runs, variant, a, b, "stalled")
    flips = stats.Rate.of(found["only_a"] + found["only_b"], found["seeds"])
    return {**found, "p": found["mcnemar_exact_p"], "flips": flips.k, "flip_fraction": flips.fraction,
            "flip_low": flips.low, "flip_high": flips.high}


@computation
def precision_pairs(source: Path, a: str = "fp32", b: str = "bf16") -> dict:
    """A stall-rate folder's seeds trained in two precisions (native kernels, each run decided), paired by
    seed: ``seeds``; per precision the stalled and generalised counts with Wilson intervals
    (``stalled_a``, ``stalled_a_low``, ...); the pairs that disagree on the stall (``only_a``, ``only_b``,
    ``agree``, McNemar exact ``p``; ``flips`` with ``flip_low``/``flip_high``) and on the headline
    (``gen_only_a``, ``gen_only_b``, ``gen_p``)."""
    runs = pd.read_csv(source)
    runs = runs[runs["decided"] & (runs["kernel"] == "native")].assign(
        stalled=lambda d: d["outcome"] == "stalled", generalised=lambda d: d["outcome"] == "generalised")
    seeds = set(runs.loc[runs["precision"] == a, "seed"]) & set(runs.loc[runs["precision"] == b, "seed"])
    runs = runs[runs["seed"].isin(seeds)]
    stall = stats.paired_agreement(runs, "precision", a, b, "stalled")
    headline = stats.paired_agreement(runs, "precision", a, b, "generalised")
    fields = {"seeds": stall["seeds"], "agree": stall["agree"], "only_a": stall["only_a"], "only_b": stall["only_b"],
              "p": stall["mcnemar_exact_p"], "gen_only_a": headline["only_a"], "gen_only_b": headline["only_b"],
              "gen_p": headline["mcnemar_exact_p"]}
    flips = stats.Rate.of(stall["only_a"] + stall["only_b"], stall["seeds"])
    fields.update(flips=flips.k, flip_low=flips.low, flip_high=flips.high)
    for side, precision in (("a", a), ("b", b)):
        mine = runs[runs["precision"] == precision].drop_duplicates("seed")
        for what in ("stalled", "generalised"):
            rate = stats.Rate.of(int(mine[what].sum()), len(mine))
            key = f"{'stalled' if what == 'stalled' else 'gen'}_{side}"
            fields.update({key: rate.k, f"{key}_fraction": rate.fraction, f"{key}_low": rate.low,
                           f"{key}_high": rate.high})
    return fields


@computation
def stall_comparison(source: Path, other: str, precision: str) -> dict:
    """Recipe (``source`` runs.csv) against another set (``other``), by seed: both rates (``a_``, ``b_``:
    :func:`stall_rate`'s fields) and Fisher's p for the stall (``p``) and for reaching the headline
    (``p_generalised``); on the seeds both trained, McNemar's (``stalled_only_a``, ``stalled_only_b``,
    ``stalled_mcnemar_p``, the same for ``generalised_``); the time to the headline with the runs that
    missed it censored (``time_median_a``, ``time_median_b``, ``time_p``: log-rank); and the headline
    among the runs that formed routing (``routed_generalised_a`` of ``routed_a``, ..., ``routed_p``)."""
    a, b = (stall_rate(path, precision) for path in (source, ROOT / other))
    p = stats.compare_rates(a["stalled"], a["seeds"], b["stalled"], b["seeds"])["p_value"]
    p_generalised = stats.compare_rates(a["generalised"], a["seeds"], b["generalised"], b["seeds"])["p_value"]
    fields = {"p": p, "p_generalised": p_generalised, **{f"a_{k}": v for k, v in a.items()},
              **{f"b_{k}": v for k, v in b.items()}}
    # and what `stall_rate.py --compare` adds: paired on the common seeds, time to the headline censored,
    # the headline among the runs that routed
    found = _script("stall_rate").compare(pd.read_csv(source), pd.read_csv(ROOT / other))[f"precision={precision}"]
    for what, pair in found["paired"].items():
        fields.update({f"{what}_pairs": pair["seeds"], f"{what}_only_a": pair["only_a"],
                       f"{what}_only_b": pair["only_b"], f"{what}_mcnemar_p": pair["mcnemar_exact_p"]})
    time, routed = found["time_to_headline"], found["routed"]
    fields.update({"time_median_a": time["median_a"], "time_median_b": time["median_b"], "time_p": time["p_value"],
                   "routed_generalised_a": routed["recipe"][0], "routed_a": routed["recipe"][1],
                   "routed_generalised_b": routed["other"][0], "routed_b": routed["other"][1],
                   "routed_p": routed["fisher_exact_p"]})
    return fields


@computation
def trajectories_comparison(source: Path, recipe: list[str], other: list[str]) -> dict:
    """The old count, every finished trajectory a trial (``recipe`` / ``other``: runs.csv paths)."""
    def count(paths):
        runs = pd.concat([pd.read_csv(ROOT / p) for p in paths])
        runs = runs[runs["finished"]]
        return int((runs["outcome"] == "stalled").sum()), len(runs)
    (ka, na), (kb, nb) = count(recipe), count(other)
    return {"a_stalled": ka, "a_runs": na, "b_stalled": kb, "b_runs": nb,
            "p": stats.compare_rates(ka, na, kb, nb)["p_value"]}


@computation
def onset(source: Path, phase: str, pool_size: int = 2000) -> dict:
    """A phase onset and its interval from a committed dynamics table (``text``: ``1,200 [1,000, 1,400]``;
    ``step``), and every phase's text by its name (``addition``, ``assignment``, ``refinement``)."""
    table = pd.read_csv(source)
    phases = measure_phases(table, pool_size=pool_size, available_steps=table["step"])
    return {"text": phases[phase]["text"], "step": phases[phase]["step"],
            **{name: found["text"] for name, found in phases.items() if isinstance(found, dict) and "text" in found}}


@computation
def onset_row(source: Path, phase: str, columns: list[str], pool_size: int = 2000, sep: str = " | ") -> dict:
    """The onset of ``phase`` in each of several dynamics tables (``columns``, beside ``source``),
    joined by ``sep`` (``cells``; a table row's cells by default)."""
    texts = [onset(source.parent / name, phase, pool_size)["text"] for name in columns]
    return {"cells": sep.join(texts)}


@computation
def json_value(source: Path, keys: list[str]) -> dict:
    """One value from a JSON file, by its keys (``value``)."""
    value = json.loads(source.read_text())
    for key in keys:
        value = value[key]
    return {"value": value}


@computation
def table_expression(source: Path, expr: str) -> dict:
    """A pandas expression on a committed CSV (``df``; ``pd`` and :mod:`compose_lens.core.stats` as ``stats``),
    e.g. ``int((df.outcome == 'stalled').sum())``."""
    df = pd.read_csv(source)
    return {"value": eval(expr, {"pd": pd, "stats": stats}, {"df": df})}  # noqa: S307 (expressions from the repository's own table)


@computation
def table_expressions(source: Path, files: list[str], exprs: dict[str, str]) -> dict:
    """Several pandas expressions (``exprs``: field -> expression on ``df``) on each of several committed
    CSVs (``files``, under the folder ``source``): each field a list, one value per file in order, for a
    sentence that quotes the same count of several tables (``{failed[0]}, {failed[1]} and {failed[2]}``)."""
    tables = [pd.read_csv(source / name) for name in files]
    return {field: [eval(expr, {"pd": pd, "stats": stats}, {"df": df}) for df in tables]  # noqa: S307
            for field, expr in exprs.items()}


@computation
def rank_test(source: Path, a: str, other: str, b: str, alternative: str = "two-sided") -> dict:
    """Mann-Whitney of two samples, each a pandas expression on a committed CSV (``a`` on
    ``source``, ``b`` on ``other``; ``df`` is the table): p, rank_biserial, common_language, n_a, n_b."""
    first = eval(a, {"pd": pd}, {"df": pd.read_csv(source)})  # noqa: S307
    second = eval(b, {"pd": pd}, {"df": pd.read_csv(ROOT / other)})  # noqa: S307
    found = stats.compare_steps(first, second, alternative=alternative)
    return {**found, "p": found["p_value"]}


@computation
def table_rows(source: Path, cells: list[str], query: str | None = None, sort: list[str] | None = None,
               also: list[str] | None = None, join: dict | None = None) -> dict:
    """A markdown table's rows made from a committed CSV (with the CSVs ``also`` appended, and the columns
    of ``join = {file, on, suffix}`` joined on its key, theirs named with the suffix): one row per line of
    ``df.query(query)`` sorted by ``sort``, its cells the expressions ``cells`` on ``row`` (the line;
    ``stats`` and ``pd`` at hand): ``rows``, the table as a page prints it, so a page's whole table is
    generated from the data rather than quoted number by number."""
    df = pd.concat([pd.read_csv(source)] + [pd.read_csv(ROOT / extra) for extra in also or []], ignore_index=True)
    if join:
        df = df.merge(pd.read_csv(ROOT / join["file"]), on=join["on"], how="left", suffixes=("", join["suffix"]))
    if query:
        df = df.query(query)
    if sort:
        df = df.sort_values(sort, kind="stable")
    lines = ["| " + " | ".join(str(eval(cell, {"pd": pd, "stats": stats}, {"row": row})) for cell in cells) + " |"  # noqa: S307
             for _, row in df.iterrows()]
    return {"rows": "\n".join(lines)}


@computation
def crosstab_rows(source: Path, rows: str, columns: str, row_order: list[str], column_order: list[str],
                  query: str | None = None) -> dict:
    """A markdown table's rows counting a committed CSV's lines by two columns (``rows`` x ``columns``,
    in the orders given, a count of 0 where none), each row ending with its total: ``rows`` (the table as
    a page prints it), so a truth-by-verdict table is generated from the data."""
    df = pd.read_csv(source, keep_default_na=False)
    if query:
        df = df.query(query)
    counts = pd.crosstab(df[rows], df[columns]).reindex(index=row_order, columns=column_order, fill_value=0)
    lines = ["| " + " | ".join([str(name), *(str(int(v)) for v in counts.loc[name]), str(int(counts.loc[name].sum()))])
             + " |" for name in row_order]
    return {"rows": "\n".join(lines)}


@computation
def time_to_event(source: Path, a_time: str, a_reached: str, other: str, b_time: str, b_reached: str) -> dict:
    """Two sets' times to an event with the runs that missed it censored (:func:`compose_lens.core.stats.compare_times`):
    each time and reached flag a pandas expression on a committed CSV (``a_`` on ``source``, ``b_`` on
    ``other``): n_a, n_b, reached_a, reached_b, median_a, median_b (Kaplan-Meier), p (log-rank)."""
    first, second = pd.read_csv(source), pd.read_csv(ROOT / other)
    found = stats.compare_times(*(eval(expr, {"pd": pd}, {"df": df})  # noqa: S307
                                  for expr, df in ((a_time, first), (a_reached, first), (b_time, second), (b_reached, second))))
    return {**found, "p": found["p_value"]}


@computation
def stalled_by_threshold(source: Path, thresholds: list[float], horizon: int = 30_000) -> dict:
    """How many seeds of a stall-rate ``runs.csv`` (one run per seed, ``stall_rate.py``'s rule) formed no
    routing within ``horizon`` steps when routing is read at each of ``thresholds`` (the 1-var pools' mean
    crossing it and staying within the rule's margin, :data:`compose_lens.training.outcome.ROUTING` at 0.90):
    ``stalled`` (a list, one count per threshold, in order), ``seeds``."""
    from compose_lens.training.outcome import ROUTING, ROUTING_POOLS
    from compose_lens.training.phases import phase_onset

    runs = stats.one_per_seed(pd.read_csv(source), _script("stall_rate").ONE_PER_SEED)
    runs = runs[runs["decided"]]
    curves = []
    for name in runs["run"]:
        log = pd.DataFrame(read_metrics(source.parent / "runs" / name))
        log = log[log["step"] <= horizon]
        curves.append((log["step"], log[list(ROUTING_POOLS)].mean(axis=1)))
    stalled = [sum(phase_onset(steps, acc, t, ROUTING.margin)["step"] is None for steps, acc in curves)
               for t in thresholds]
    return {"stalled": stalled, "seeds": len(runs)}


@computation
def das_row(source: Path, model: str, site: str) -> dict:
    """One model's and site's IIA from a committed ``das_all.csv`` as docs/methods.md's table row cells
    (``cells``: learned at each rank, the largest in bold | random subspace at each rank | arbitrary labels)."""
    runs = pd.read_csv(source)
    runs = runs[(runs["model"] == model) & (runs["site"] == site)].sort_values("rank")
    iia = {control: [f"{v:.2f}" for v in group["iia"]] for control, group in runs.groupby("control")}
    learned = iia["learned"][:-1] + [f"**{iia['learned'][-1]}**"]
    return {"cells": f"{' / '.join(learned)} | {' / '.join(iia['random subspace'])} | {iia['arbitrary labels'][-1]}"}


@computation
def same_mlp_row(source: Path) -> dict:
    """A committed ``same_mlp.json`` as docs/same-mlp.md's table row cells (``cells``): each test's status,
    deciding condition and value with its 95 % interval (the interchange with its reference, the feature
    transfer with its split-half reference, the probe's subspace share), then the verdict in bold."""
    tests = json.loads(source.read_text())
    swap, transfer, probe = (tests["tests"][name] for name in ("interchange", "feature_transfer", "probe_transfer"))
    share = probe["subspace"]

    def value(test: dict) -> str:
        return f"{test['effect']:.3f} [{test['ci'][0]:.3f}, {test['ci'][1]:.3f}]"

    return {"cells": f"{swap['status']}: {swap['deciding_condition']} {value(swap)}, its reference "
                     f"{swap['reference_condition']} {swap['reference']:.3f} | {transfer['status']}: "
                     f"{transfer['deciding_condition']} {value(transfer)}; {transfer['reference_split_half']:.3f} | "
                     f"{probe['status']}: {share['deciding_condition']} {value(share)} | **{tests['verdict']}**"}


@computation
def interchange(source: Path, side: str, condition: str, isolation: str = "token") -> dict:
    """One same-MLP interchange condition (value, low, high) from a ``same_mlp_interchange.csv``."""
    df = pd.read_csv(source)
    row = df[(df["side"] == side) & (df["condition"] == condition) & (df["isolation"] == isolation)].iloc[0]
    return {"value": row["value"], "low": row["ci_low"], "high": row["ci_high"]}


@computation
def wilson(source: Path, k: int, n: int) -> dict:
    """A count's Wilson interval (the count quoted on the page, ``source`` the table it comes from)."""
    low, high = stats.wilson_interval(k, n)
    return {"k": k, "n": n, "low": low, "high": high}


@computation
def text_match(source: Path, pattern: str) -> dict:
    """The named groups of the first match of a regular expression (``pattern``, multi-line) in a
    committed text file, for a log that writes no table (``(?P<score>[0-9.]+)`` gives ``score``), as the
    log prints them: a page quotes them as written."""
    found = re.search(pattern, source.read_text(), re.MULTILINE)
    if found is None:
        raise ValueError(f"{pattern!r} matches nothing in it")
    return found.groupdict()


@computation
def diverged_runs(source: Path) -> dict:
    """``experiments/divergence_scan.py`` over a folder: runs with a log, how many ever read diverged, how
    many of those later read healthy again (came_back), and the earliest step any read diverged."""
    n, frame = _script("divergence_scan").scan([source])
    came_back = int((frame["came_back_after"] > 0).sum()) if len(frame) else 0
    first = int(frame["first_diverged_at"].min()) if len(frame) else None
    return {"runs": n, "diverged": len(frame), "came_back": came_back, "first_diverged_at": first}


# -- the check -------------------------------------------------------------------------------------

# a claim's keys and their types (args: the computation's keyword arguments; the one key a claim may leave out)
CLAIM_KEYS = {"doc": str, "quote": str, "source": str, "compute": str, "template": str, "args": dict}
OPTIONAL_KEYS = ("args",)


class ClaimsError(ComposeLensError):
    """A claims table that cannot be checked: one line per problem (``lines``), each naming its claim."""

    def __init__(self, lines: list[str]):
        super().__init__("; ".join(lines))
        self.lines = lines


def damage(claim, root: Path = ROOT) -> str | None:
    """Why ``claim`` (one ``[[claim]]`` of a table) cannot be checked, in a few words, or None: a claim
    is a table of :data:`CLAIM_KEYS`, its page is there, its computation registered, and it checks
    something: a quote to find, and a template that takes a field from the data."""
    if not isinstance(claim, dict):
        return f"is {_a(claim)}, not a table; write it as [[claim]] with {', '.join(CLAIM_KEYS)}"
    missing = [k for k in CLAIM_KEYS if k not in claim and k not in OPTIONAL_KEYS]
    if missing:
        return f"has no {' and no '.join(missing)}"
    unknown = sorted(set(claim) - set(CLAIM_KEYS))
    if unknown:
        return f"has the unknown key(s) {', '.join(unknown)}; a claim has {', '.join(CLAIM_KEYS)}"
    for key, kind in CLAIM_KEYS.items():
        if key in claim and not isinstance(claim[key], kind):
            wanted = "a string" if kind is str else "a table of the computation's arguments"
            return f"has a {key} that is {_a(claim[key])}, not {wanted}"
    if not claim["quote"].strip():
        return "has an empty quote, so it checks nothing; quote the text as the page prints it"
    if not any(field is not None for _, field, _, _ in _fields_of(claim["template"])):
        return "has a template that takes no field from the data, so it checks nothing; write the number as {field}"
    if claim["compute"] not in COMPUTATIONS:
        return f"has the unknown computation {claim['compute']!r}; known: {', '.join(sorted(COMPUTATIONS))}"
    if not_there(root / claim["doc"]):
        return f"quotes the page {claim['doc']}: {not_there(root / claim['doc'])}"
    return None


def _a(value) -> str:
    """``value``'s type as a sentence says it: "an int", "a list"."""
    name = type(value).__name__
    return f"{'an' if name[:1] in 'aeiou' else 'a'} {name}"


def _fields_of(template: str) -> list:
    """The parts of a template (:class:`string.Formatter`), none where its braces do not pair."""
    try:
        return list(string.Formatter().parse(template))
    except ValueError:
        return []


def _flat(text: str) -> str:
    return re.sub(r"\s+", " ", text).strip()


def check(claim: dict, root: Path = ROOT) -> list[str]:
    """What is wrong with one claim ([] when it holds); a damaged claim (:func:`damage`) is that."""
    damaged = damage(claim, root)
    if damaged:
        return [f"the claim {damaged}"]
    problems = []
    quote, doc = claim["quote"], root / claim["doc"]
    if _flat(quote) not in _flat(doc.read_text()):
        problems.append(f"{claim['doc']}: the quote {quote!r} is not on the page")
    compute = COMPUTATIONS.get(claim["compute"])
    if compute is None:
        return problems + [f"unknown computation {claim['compute']!r}; known: {sorted(COMPUTATIONS)}"]
    try:
        fields = compute(root / claim["source"], **claim.get("args", {}))
        given = claim["template"].format(**fields)
    except (OSError, ValueError, KeyError, IndexError, SyntaxError, NameError, AttributeError, TypeError) as exc:
        # the data is missing or does not hold the fields, or the claim's own expression is broken
        return problems + [f"{claim['doc']}: {claim['source']} gives no value for the quote ({type(exc).__name__}: {exc})"]
    if _flat(given) != _flat(quote):
        problems.append(f"{claim['doc']}: quotes {quote!r}, but {claim['source']} gives {given!r}")
    return problems


def tables(path: Path) -> list[Path]:
    """The TOML files of ``path``: itself, or a folder's ``*.toml`` by name."""
    return sorted(path.glob("*.toml")) if path.is_dir() else [path]


def load(path: Path = CLAIMS) -> list[dict]:
    """The claims of a table (or of every table in a folder), read whole: a table that is not TOML, none
    that holds a ``[[claim]]``, or any damaged claim (:func:`damage`), raises :class:`ClaimsError` with one
    line per problem, before any claim is checked."""
    claims, lines = [], []
    for table in tables(path):
        found = load_toml(table).get("claim", [])  # one line where it is not a UTF-8 TOML file
        if not isinstance(found, list):
            lines.append(f"{table}: its claim is not a list of [[claim]] blocks")
            continue
        for number, claim in enumerate(found, 1):
            why = damage(claim)
            if why:
                page = f" ({claim['doc']})" if isinstance(claim, dict) and isinstance(claim.get("doc"), str) else ""
                lines.append(f"{table}: claim {number}{page} {why}")
        claims += found
    if not claims and not lines:
        raise ClaimsError([f"{path}: holds no [[claim]] table; a claims table is a list of [[claim]] blocks "
                           f"(as docs/claims/stalls.toml)"])
    if lines:
        raise ClaimsError(lines)
    return claims


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--claims", type=Path, default=CLAIMS)
    p.add_argument("--coverage", action="store_true",
                   help="per page, the numbers claims cover, the settings and the uncovered ones, each listed "
                        "(experiments/claims_coverage.py); exit 1 on any uncovered number or stale setting")
    a = p.parse_args(argv)
    if not a.claims.is_dir() and not_there(a.claims):
        print(f"error: --claims {a.claims}: {not_there(a.claims)}; give a claims table such as docs/claims/stalls.toml, or a folder of them",
              file=sys.stderr)
        return 2
    try:
        claims = load(a.claims)
    except ClaimsError as exc:
        print("".join(f"error: {line}\n" for line in exc.lines), end="", file=sys.stderr)
        return 2
    except ComposeLensError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    if a.coverage:
        return _coverage(claims)
    wrong = 0
    for claim in claims:
        problems = check(claim)
        wrong += bool(problems)
        print(("ok     " if not problems else "WRONG  ") + f"{claim['doc']}: {claim['quote'][:90]}")
        for line in problems:
            print(f"       {line}")
    print(f"{wrong} of {len(claims)} claims wrong")
    return 1 if wrong else 0


def _coverage(claims: list[dict]) -> int:
    """The coverage report; exit 1 on an uncovered number or a stale setting."""
    coverage = _script("claims_coverage")
    settings = coverage.load_settings()
    found = coverage.coverage(claims, settings)
    problems = coverage.stale_settings(settings)
    for line in coverage.report(found, len(claims)) + problems:
        print(line)
    uncovered = sum(len(page.uncovered) for page in found)
    print(f"{uncovered} uncovered numbers, {len(problems)} stale settings")
    return 1 if uncovered or problems else 0


if __name__ == "__main__":
    sys.exit(main())
