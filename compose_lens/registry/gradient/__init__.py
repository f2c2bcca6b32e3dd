"""The ``gradient`` analysis: the theory's gradient claim, the associative-memory term, on the final model and
over the checkpoints (:mod:`.terms`).
"""

from __future__ import annotations

from compose_lens.registry.analysis import Analysis, Finding, Result


def _gradient_applies(config) -> bool:
    from compose_lens.registry.gradient.terms import problem

    return problem(config.model) is None


def _gradient(ctx: Context, settings: dict) -> Result:
    from compose_lens.registry.gradient import terms as gradient_terms

    table = gradient_terms.shares_of_model(ctx.loaded, settings["n"], ctx.seed)
    kept = table[table["term"] == gradient_terms.KEPT].set_index("matrix")["cosine"]
    facts = {f"gradient_kept_cosine_{matrix}": float(kept[matrix]) for matrix in gradient_terms.MATRICES}
    ideal = gradient_terms.idealisation(ctx.model, ctx.config.model)
    return Result(tables={"gradient_shares": table}, documents={"idealisation": ideal}, facts=facts)


def _gradient_figures(ctx: Context, result: Result, settings: dict) -> list:
    from compose_lens.registry.gradient.figure import gradient_terms_figure

    return [("gradient_terms", gradient_terms_figure, (result.tables["gradient_shares"],), 120)]


def _gradient_section(inp, result: Result, settings: dict) -> str:
    from compose_lens.training import runs
    from compose_lens.registry.gradient import terms as gradient_terms
    from compose_lens.core.markup import html_table
    from compose_lens.registry.gradient.figure import gradient_shares_figure

    ideal, table = result.documents["idealisation"], result.tables["gradient_shares"]
    overlap = (f", embedding_overlap {ideal['embedding_overlap']:g}" if ideal["embeddings"] == "orthogonal" else "")
    measured = [f"the mean cosine between two distinct token embeddings is {ideal['token_mean_cosine']:.3f}"]
    if ideal["frozen_embedding_change"] is not None:
        measured.append(f"the frozen embeddings differ from the fixed ones by at most {ideal['frozen_embedding_change']:.2g}")
    if ideal["forbidden_entry_max"] is not None:
        measured.append(f"the largest entry a writer has outside its residual block is {ideal['forbidden_entry_max']:.2g}")
    parts = [f"<p>The theory reasons about a transformer with orthogonal embeddings and a disentangled residual, "
             f"and keeps one associative-memory term of the gradient that builds binding and routing "
             f"(docs/idealised.md). This model: embeddings <b>{ideal['embeddings']}</b>{overlap}, residual "
             f"<b>{ideal['residual']}</b>; {'; '.join(measured)}. Below, the gradient of the loss with respect to "
             f"each product, written as a sum of named terms (they sum to the full gradient), on "
             f"{settings['n']} training sequences at the final model: a kept term's cosine with the full "
             f"gradient near 1 is the claim holding, near 0 its failing.</p>",
             html_table([[r.matrix, r.term, f"{r.share:.3f}", f"{r.cosine:.3f}"] for r in table.itertuples()],
                        ["product", "term", "share ||term|| / ||full||", "cosine with the full gradient"]),
             inp.report.figure(result.figure("gradient_terms"), "gradient_terms",
                               "Each product's gradient as its named terms at this model: a term's cosine with the "
                               "full gradient (bars; the kept, associative-memory term blue) and its share of the "
                               "full gradient's norm.")]
    if (inp.run_dir / runs.CHECKPOINTS_DIR).is_dir():
        over = gradient_terms.shares_over_training(inp.run_dir, settings["n"], inp.context.seed,
                                                   most=settings["checkpoints"])
        parts.append(inp.report.figure(gradient_shares_figure(over), "gradient_shares",
                                       f"The kept term's cosine with the full gradient at the initial weights and "
                                       f"{over['step'].nunique() - 1} checkpoints, one product a panel."))
    return "\n".join(parts)


GRADIENT = Analysis(name="gradient", title="The theory's gradient claim: the associative-memory term",
                    compute=_gradient, settings={"n": 512, "checkpoints": 12},
                    module="compose_lens.registry.gradient.terms", tables=("gradient_shares",),
                    documents=("idealisation",),
                    figures=("gradient_terms", "gradient_shares"), draw=_gradient_figures,
                    section=_gradient_section,
                    applies=_gradient_applies,
                    findings=(Finding("gradient_kept_cosine_qk0", "layer-1 QK gradient: cosine of the kept "
                                      "(binding) term with the full gradient", "near 1, the theory (>= 0.9)", 0.9),
                              Finding("gradient_kept_cosine_qk1", "layer-2 QK gradient: cosine of the kept "
                                      "(routing) term with the full gradient", "near 1, the theory (>= 0.9)", 0.9)),
                    exports=("shares_of_model", "shares_over_training", "idealisation",
                             "gradient_shares=compose_lens.registry.gradient.terms:shares"))
