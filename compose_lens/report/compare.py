"""Two models side by side: what changed between them, and by more than the prompts' noise?

:func:`compare` reads two models of one task and split (two checkpoints of a run, or two runs) on the
**same prompts** and answers with one row per measure: each of the nine pools' accuracy (``compose-lens
evaluate``); the located roles (:mod:`compose_lens.analysis.locate`), component and score; every finding a
registered analysis declares (``Analysis.findings``), computed as ``analyze`` computes it
(:func:`compose_lens.report.context.compute`; the causal analyses' only with ``causal=True``); the same-MLP
verdict and each of its tests' effect; MLP2's key frequencies.

docs/compare.md ("How each interval is had") says how each row's interval of B - A is had (``interval``: a
paired bootstrap over the prompts, ``exact`` where nothing is sampled, or ``n/a``) and when a row
``changed``: the interval excludes 0 (exact: the difference is not 0, float noise below
:data:`compose_lens.core.stats.ZERO_TOLERANCE` aside), a categorical differs, or only one model has the
measure; NA where the two differ and no interval says whether by more than noise.

:func:`text_table`, :func:`json_rows` and :func:`html_page` give the rows as the command prints them,
``compare.json`` holds them and ``compare.html`` shows them (:func:`html_tables`: also the report's
"Compared with" section); :func:`write` writes the three files. ``compare("paper", "paper")`` gives 0 in
every difference and False in every ``changed``.
"""

from __future__ import annotations

import dataclasses
import math
import zlib
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

import numpy as np
import pandas as pd
import torch
from markupsafe import Markup

from compose_lens import registry
from compose_lens.report import context
from compose_lens.core import stats
from compose_lens.analysis import locate, probes
from compose_lens.analysis.activations import Activations, torch_threads
from compose_lens.core.config import TaskConfig
from compose_lens.data.sampler import concat_batches, make_pools
from compose_lens.core.errors import ComposeLensError
from compose_lens.training.evaluate import correct_mask
from compose_lens.core.files import atomic_path
from compose_lens.core.markup import COMPARISON_STYLE, html_table, page, render
from compose_lens.core.provenance import provenance
from compose_lens.training.runs import write_document, write_table
from compose_lens.training.subject import Subject, load_subject

POOL_SIZE = 2000  # sequences per pool, as `compose-lens evaluate`
# The fewest prompts per pool compare reads. B - A's percentile interval excludes 0 once fewer than 2.5 % of the
# resamples miss every prompt where the two differ, (1 - k/n)^n < 0.025 for k prompts of n all differing one
# way: from n = 9 on (2,000 included) that takes k = 4 prompts; at n = 1 one prompt marked a pool "changed"
MIN_POOL_SIZE = 10
PROBE_SEQUENCES = 1800  # the probe batch the probes analysis reads its findings on (circuit_summary's n)
LOCATE_SEQUENCES = 600  # the probe batch locate scores the heads on (locate.locate's n)
COLUMNS = ("measure", "what", "group", "A", "A_low", "A_high", "B", "B_low", "B_high", "difference", "low", "high",
           "interval", "changed")
NAN = float("nan")

# the findings that are a rate or a mean over the probe batch: each as a function of its activations
# (the probes analysis's own functions), so that a resample of the prompts is a subset of them
OVER_PROMPTS: dict[str, Callable[[context.Context, Activations], float]] = {
    "prev_token_attention_score": lambda ctx, acts: probes.prev_token_attention_score(ctx.loaded, acts=acts),
    "equals_to_operands_score":
        lambda ctx, acts: probes.equals_to_operands_score(ctx.loaded, acts=acts, heads=ctx.heads),
    "equals_to_values_score": lambda ctx, acts: probes.equals_to_values_score(ctx.loaded, acts=acts),
}
# the findings with nothing sampled (exact) or without an interval (n/a), and why
UNSAMPLED = {
    "variable_identity_score": "exact (the weights alone)",
    "ov_mlp_addition_accuracy": "exact (all p^2 operand pairs)",
    "key_frequency_strength": "exact (the p^2 constant-operand grid)",
    "prev_token_probe_accuracy": "n/a (a fitted probe's held-out accuracy)",
    "gradient_kept_cosine_qk0": "n/a (a cosine of gradients summed over sequences)",
    "gradient_kept_cosine_qk1": "n/a (a cosine of gradients summed over sequences)",
}


@dataclass
class Reading:
    """One measure of one model: its value, its own interval, and (a rate or a mean over prompts)
    its statistic on each shared resample of the prompts."""

    measure: str
    group: str
    value: Any
    interval: str  # how the difference's interval is had (see the module doc)
    low: float = NAN
    high: float = NAN
    replicates: np.ndarray | None = None
    categorical: bool = False
    what: str = ""  # what it measures, in words (a finding's declaration)


def resamples_of(n: int, seed: int, resamples: int, prompts: str) -> np.ndarray:
    """(resamples, n) indices of ``n`` prompts drawn with replacement: the same for both models
    (seeded by ``seed`` and the name of the prompt set)."""
    return stats.bootstrap_draws(n, [seed, zlib.crc32(prompts.encode())], resamples)


def _bootstrapped(measure: str, group: str, value: float, replicates: np.ndarray, n: int) -> Reading:
    low, high = stats.percentile_interval(replicates[~np.isnan(replicates)]) if not np.isnan(replicates).all() \
        else (NAN, NAN)
    return Reading(measure, group, value, f"paired bootstrap over {n} prompts", float(low), float(high), replicates)


def _pools(subject: Subject, pool_size: int, seed: int, resamples: int) -> list[Reading]:
    joined, groups = concat_batches(make_pools(subject.split, pool_size, seed))
    correct = correct_mask(subject.model, subject.config.model, joined).numpy()
    readings = []
    for name, rows in groups.items():
        hits = correct[rows].astype(float)
        k, n = int(hits.sum()), len(hits)
        low, high = stats.wilson_interval(k, n)
        draws = resamples_of(n, seed, resamples, f"pool {name}")
        readings.append(Reading(f"accuracy: {name}", "pool accuracy", k / n, f"paired bootstrap over {n} prompts",
                                low, high, hits[draws].mean(axis=1)))
    return readings


def _roles(ctx: context.Context, resamples: int) -> list[Reading]:
    """The three roles: the component (categorical) and the score. A head role's score is the best
    head's score over the probe batch locate reads (resampled); the adder's reads the whole grid."""
    location = ctx.plan[0]
    tokens = probes.probe_batch(ctx.split, LOCATE_SEQUENCES, ctx.seed).tokens
    with torch.no_grad():
        patterns = locate.trace(ctx.model, ctx.config, tokens).patterns
    draws = resamples_of(len(tokens), ctx.seed, resamples, "locate")
    best = np.full((len(draws), 2), NAN)
    for r, idx in enumerate(torch.from_numpy(draws)):
        table = locate.head_scores_of(ctx.config.task, tokens[idx], [p[idx] for p in patterns])
        best[r] = [table.loc[table["role"] == role, "score"].max() for role in ("binder", "router")]
    return [reading for role in location.roles() for reading in (
        Reading(f"{role.role}: component", "located roles", role.component or "none", "n/a (a name)", categorical=True),
        Reading("adder: score", "located roles", role.score, "exact (the p^2 constant-operand grid)")
        if role.role == "adder" else _bootstrapped(f"{role.role}: score", "located roles", role.score,
                                                   best[:, 0 if role.role == "binder" else 1], len(tokens)))]


RESAMPLED_FIELDS = ("tokens", "pattern0", "pattern1_last")  # what the OVER_PROMPTS statistics read


def _subset(acts: Activations, idx: torch.Tensor) -> Activations:
    """The activations of the prompts ``idx`` (a resample: repeats allowed) that the
    :data:`OVER_PROMPTS` statistics read; the others are None (a statistic reading one fails loudly)."""
    kept = {f.name: (getattr(acts, f.name) if not isinstance(getattr(acts, f.name), torch.Tensor)
                     else getattr(acts, f.name)[idx] if f.name in RESAMPLED_FIELDS else None)
            for f in dataclasses.fields(acts)}
    out = Activations(**kept)
    if hasattr(acts, "gatherer_last"):
        out.gatherer_last = None if acts.gatherer_last is None else acts.gatherer_last[idx]
    return out


def _findings(ctx: context.Context, analyses: list[registry.Analysis], settings: dict, resamples: int
              ) -> tuple[list[Reading], dict[str, registry.Result]]:
    results = {a.name: context.compute(a, ctx, settings.get(a.name), figures=False) for a in analyses}
    resampled = [f.key for a in analyses for f in a.findings if f.key in OVER_PROMPTS]
    replicates: dict[str, np.ndarray] = {}
    if resampled:
        with torch.no_grad():
            acts = probes.probe_activations(ctx.loaded, PROBE_SEQUENCES, ctx.seed, heads=ctx.heads)
            draws = torch.from_numpy(resamples_of(len(acts), ctx.seed, resamples, "probes"))
            values = [[OVER_PROMPTS[key](ctx, sub) for key in resampled] for sub in (_subset(acts, i) for i in draws)]
        replicates = dict(zip(resampled, np.array(values, dtype=float).T))
    readings = []
    for analysis in analyses:
        for finding in analysis.findings:
            value = results[analysis.name].facts.get(finding.key)
            value = NAN if value is None else float(value)
            if finding.key in replicates:
                readings.append(_bootstrapped(finding.key, "findings", value, replicates[finding.key], len(acts)))
            else:
                readings.append(Reading(finding.key, "findings", value,
                                        UNSAMPLED.get(finding.key, "n/a (no per-prompt form)")))
            readings[-1].what = finding.text()
    return readings, results


def _same_mlp(result: registry.Result) -> list[Reading]:
    report = result.documents["same_mlp"]
    readings = [Reading("same MLP: verdict", "same MLP", report["verdict"], "n/a (a verdict)", categorical=True)]
    for name, test in (report.get("tests") or {}).items():
        effect, low, high = (NAN if v is None else float(v)
                             for v in (test.get("effect"), *(test.get("ci") or [None, None])))
        readings.append(Reading(f"same MLP: {name} effect", "same MLP", effect, "n/a (each model's own interval)",
                                low, high))
    return readings


def measure(subject: Subject, seed: int = 0, pool_size: int = POOL_SIZE, causal: bool = False,
            settings: dict[str, dict] | None = None, resamples: int = stats.BOOTSTRAP_RESAMPLES) -> list[Reading]:
    """Every measure of one model, in the table's order (the half of :func:`compare` that reads one model)."""
    settings = settings or {}
    for name in settings:
        registry.by_name(registry.ANALYSES, name)  # an unknown analysis: one line
    same_mlp = registry.by_name(registry.ANALYSES, "same_mlp")
    analyses = _analyses_of(subject.config, causal)
    with context.Context(subject, seed) as ctx, torch_threads(1):
        readings = _pools(ctx.loaded, pool_size, seed, resamples)
        readings += _roles(ctx, resamples)
        found, results = _findings(ctx, analyses, settings, resamples)
        readings += found
        readings += _same_mlp(context.compute(same_mlp, ctx, settings.get("same_mlp"), figures=False))
        keys = results["probes"].facts.get("key_frequencies") if "probes" in results else None
        readings.append(Reading("MLP2 key frequencies", "Fourier", " ".join(map(str, keys or [])) or "none",
                                "n/a (a set of frequencies)", categorical=True))
    return readings


def _analyses_of(config, causal: bool) -> list:
    """The registered analyses whose findings :func:`measure` reads of a model of ``config`` (the same-MLP
    test aside)."""
    return [a for a in registry.ANALYSES if a.findings and a.reads(config) and (causal or not a.causal)]


def check_measurable(config, source: str, causal: bool = False, settings: dict[str, dict] | None = None) -> None:
    """Guard every analysis :func:`measure` computes of the model ``source`` (its ``config``) before any is
    computed: one it cannot read is refused in one line naming the model."""
    for analysis in [*_analyses_of(config, causal), registry.by_name(registry.ANALYSES, "same_mlp")]:
        try:
            context.guard(analysis, config, (settings or {}).get(analysis.name))
        except ComposeLensError as exc:
            raise ComposeLensError(f"{source}: {exc}") from None


def check_comparable(a: Subject, b: Subject) -> None:
    """Refuse, in one line, two models that do not share the task and its split: the same prompts
    would not mean the same thing to both (or not be held out from both)."""
    differs = [f"{f.name} {getattr(a.task, f.name)!r} vs {getattr(b.task, f.name)!r}"
               for f in dataclasses.fields(TaskConfig) if getattr(a.task, f.name) != getattr(b.task, f.name)]
    if differs:
        raise ComposeLensError(f"{a.source} and {b.source} were trained on different tasks ({'; '.join(differs)}); "
                               f"compare reads both on the same prompts, so give two models of one task")
    if not (torch.equal(a.split.heldout_pairs, b.split.heldout_pairs)
            and torch.equal(a.split.two_var_counts, b.split.two_var_counts)):
        raise ComposeLensError(f"{a.source} and {b.source} hold out different pairs (different splits); compare "
                               f"reads both on the same prompts, so give two models of one split")


def _changed(a: Reading, b: Reading, difference: float, low: float, high: float) -> Any:
    if np.isnan(a.value) and np.isnan(b.value):
        return False
    if np.isnan(a.value) or np.isnan(b.value):
        return True  # measured in one model only: a role no head plays in the other
    if not np.isnan(low):
        return bool(low > 0 or high < 0)
    return False if difference == 0 else pd.NA


def _rounded(row: dict) -> dict:
    """Every float to 6 significant digits: float32 arithmetic resolves no more (0.9922409653663635)."""
    return {k: float(f"{v:.6g}") if isinstance(v, float) and not math.isnan(v) else v for k, v in row.items()}


def _row(a: Reading, b: Reading) -> dict:
    row = {"measure": a.measure, "what": a.what, "group": a.group, "A": a.value, "A_low": a.low, "A_high": a.high,
           "B": b.value, "B_low": b.low, "B_high": b.high, "interval": a.interval}
    if a.categorical or b.categorical:
        return _rounded({**row, "difference": None, "low": NAN, "high": NAN, "changed": str(a.value) != str(b.value)})
    difference = float(stats.snap_to_zero(np.float64(b.value - a.value)))
    low = high = NAN
    if a.replicates is not None and b.replicates is not None:
        diffs = stats.snap_to_zero(b.replicates - a.replicates)
        diffs = diffs[~np.isnan(diffs)]
        if len(diffs):
            low, high = (float(v) for v in stats.percentile_interval(diffs))
    elif a.interval.startswith("exact") and not np.isnan(difference):
        low = high = difference
    return _rounded({**row, "difference": difference, "low": low, "high": high,
                     "changed": _changed(a, b, difference, low, high)})


def compare(a: Subject | str | Path, b: Subject | str | Path, *, seed: int = 0, pool_size: int = POOL_SIZE,
            causal: bool = False, settings: dict[str, dict] | None = None,
            resamples: int = stats.BOOTSTRAP_RESAMPLES) -> pd.DataFrame:
    """Two models side by side, one row per measure, read on the same prompts (the module doc says how).

    The columns: ``measure``, ``what`` (a finding's meaning), ``group``; ``A`` and ``B`` with each model's own
    interval (``A_low``, ``A_high``, ``B_low``, ``B_high``, where it has one); ``difference`` (B - A) and its 95 %
    interval (``low``, ``high``); ``interval`` (how that interval was had) and ``changed``.

    ``a``, ``b``: :class:`~compose_lens.training.subject.Subject` or what
    :func:`~compose_lens.training.subject.load_subject` takes (``"paper"``, a run, a checkpoint, a study
    ``.pth``, a TransformerLens model directory). ``seed``: of the prompts and the resamples; ``pool_size``:
    sequences per pool; ``causal``: also the causal analyses' findings; ``settings``: per analysis name,
    settings changed from the registry's defaults (e.g. ``{"same_mlp": {"n": 100}}``); ``resamples``: of the
    prompts, for the paired intervals. ``.attrs`` holds the two sources and the settings."""
    a, b = (s if isinstance(s, Subject) else load_subject(s, bridge=False) for s in (a, b))
    check_comparable(a, b)
    if pool_size < MIN_POOL_SIZE or resamples < 1:
        raise ComposeLensError(f"pool_size must be at least {MIN_POOL_SIZE} and resamples at least 1 (got "
                               f"{pool_size}, {resamples}): on fewer prompts one differing prompt reads as a change")
    for subject in (a, b):
        check_measurable(subject.config, subject.source, causal, settings)
    options = {"seed": seed, "pool_size": pool_size, "causal": causal, "settings": settings or {},
               "resamples": resamples}
    read_a, read_b = ({r.measure: r for r in measure(s, **options)} for s in (a, b))
    rows = []
    for name in [*read_a, *(m for m in read_b if m not in read_a)]:  # an analysis may read one model only
        ra, rb = read_a.get(name), read_b.get(name)
        ra = ra or dataclasses.replace(rb, value=NAN, low=NAN, high=NAN, replicates=None)
        rb = rb or dataclasses.replace(ra, value=NAN, low=NAN, high=NAN, replicates=None)
        rows.append(_row(ra, rb))
    table = pd.DataFrame(rows, columns=list(COLUMNS))
    table.attrs.update({"a": a.source, "b": b.source, **options})
    return table


def text_table(table: pd.DataFrame) -> list[list[str]]:
    """The rows as a reader reads them: each value with its interval at the digits it supports
    (:func:`compose_lens.core.stats.format_estimate`), the difference with its interval, changed."""
    def one(value, low, high) -> str:
        if isinstance(value, str) or value is None:
            return "" if value is None else value
        if isinstance(value, float) and math.isnan(value):
            return "none"
        if low == high == value or np.isnan(low):  # exact, or no interval: the digits float32 resolves
            return stats.format_estimate(value, significant=4)
        return stats.format_estimate(value, low, high)

    def difference(r) -> str:
        """B - A; without an interval, at the decimals its operands print with (0.7914 - 0.7084 reads
        0.0830, not 0.08300: a difference resolves no more than the finer of its operands)."""
        if isinstance(r.A, str) or isinstance(r.B, str):
            return ""
        if isinstance(r.difference, float) and not math.isnan(r.difference) and np.isnan(r.low):
            decimals = max(len(one(v, NAN, NAN).partition(".")[2]) for v in (r.A, r.B))
            return f"{r.difference:.{decimals}f}"
        return one(r.difference, r.low, r.high)

    def changed(value) -> str:
        return "?" if value is pd.NA or (isinstance(value, float) and math.isnan(value)) else str(bool(value))

    return [[r.measure, one(r.A, r.A_low, r.A_high), one(r.B, r.B_low, r.B_high), difference(r), changed(r.changed)]
            for r in table.itertuples()]


PAGE_STYLE = """
body{font-family:system-ui,-apple-system,"Segoe UI",Roboto,sans-serif;margin:24px;color:#222;max-width:1200px}
table{border-collapse:collapse;margin:6px 0 18px}
th,td{border-bottom:1px solid #ddd;padding:3px 10px;text-align:left;vertical-align:top}
td.num{text-align:right}
.note{color:#555}
""" + COMPARISON_STYLE
ROW_MARK = {"True": "changed", "?": "unsure", "False": None}  # text_table's changed column -> the row's class
HOW_READ = ("Each value with its 95 % interval (pool accuracies: Wilson); B - A with its 95 % interval: a paired "
            "bootstrap over the same prompts where the measure is a rate or a mean over prompts, the difference "
            "itself where nothing is sampled (exact), none otherwise (n/a). <i>changed</i>: the interval excludes "
            "0, or a name differs.")


def html_tables(table: pd.DataFrame, heading: str = "h2") -> str:
    """:func:`compare`'s rows as HTML (:func:`text_table`'s numbers), one table per group under a ``heading``,
    the counts of changed / unsure / unchanged rows above them; a changed row highlighted (class ``changed``),
    one that differs where no interval says whether by more than noise greyed (``unsure``, changed ``?``)."""
    texts = text_table(table)
    sections = []
    for group in dict.fromkeys(table["group"]):
        rows, classes = [], []
        for text, row in zip(texts, table.itertuples()):
            if row.group == group:
                measure, a, b, difference, changed = text
                breakable = Markup("_<wbr>").join(measure.split("_"))  # a long name wraps after an underscore
                rows.append([breakable, row.what if isinstance(row.what, str) else "", a, b, difference,
                             row.interval, changed])
                classes.append(ROW_MARK[changed])
        header = ["measure", "what it measures", "A", "B", "B - A", "interval of B - A", "changed"]
        if not any(r[1] for r in rows):  # only the findings say what they measure
            header, rows = header[:1] + header[2:], [r[:1] + r[2:] for r in rows]
        sections.append((str(group), Markup(html_table(rows, header, classes))))
    counts = {mark: sum(t[-1] == mark for t in texts) for mark in ROW_MARK}
    return render("comparison.html", counts=counts, groups=sections, heading=Markup(heading))


def read_on(table: pd.DataFrame) -> str:
    """The settings both models were read with, in words (``seed 0, pool_size 2000, resamples 1000``)."""
    return ", ".join(f"{k} {table.attrs[k]}" for k in ("seed", "pool_size", "resamples") if k in table.attrs)


def html_page(table: pd.DataFrame) -> str:
    """:func:`compare`'s table as one offline HTML page (``compare.html``): the two models, how to read
    the intervals, and :func:`html_tables`. The page loads nothing."""
    a, b = (str(table.attrs.get(k, k.upper())) for k in ("a", "b"))
    intro = render("compare_intro.html", a=a, b=b, read_on=read_on(table), how_read=Markup(HOW_READ))
    return page(f"compare: {a} vs {b}", intro + "\n" + html_tables(table), PAGE_STYLE)


def write(table: pd.DataFrame, a: Subject, b: Subject, folder: Path) -> list[Path]:
    """Write ``compare.csv`` (its provenance beside it: both configurations, the settings), ``compare.json``
    (the rows, the two models, the settings) and ``compare.html`` into ``folder``, each whole or not at all."""
    folder.mkdir(parents=True, exist_ok=True)
    settings = {k: v for k, v in table.attrs.items() if k not in ("a", "b", "seed")}
    record = provenance(a.config, table.attrs.get("seed", 0), a.source, b=b.source, b_config=b.config.to_dict(),
                        **settings)
    write_table(table, folder / "compare.csv", record)
    write_document({"a": a.source, "b": b.source, "settings": settings, "rows": json_rows(table)},
                   folder / "compare.json", record)
    with atomic_path(folder / "compare.html") as tmp:
        tmp.write_text(html_page(table), encoding="utf-8")
    return [folder / name for name in ("compare.csv", "compare.json", "compare.html")]


def json_rows(table: pd.DataFrame) -> list[dict]:
    """The rows for JSON: NaN and NA as null."""
    def plain(value):
        if value is None or value is pd.NA or (isinstance(value, float) and math.isnan(value)):
            return None
        return value.item() if isinstance(value, np.generic) else value

    return [{k: plain(v) for k, v in row.items()} for row in table.to_dict(orient="records")]
