"""A planted model's exhaustive gate, read from the paper model whose function it computes.

The same-MLP verdict and modularity are decided only for a model that composes: the study's headline
on the exhaustive sets (:func:`compose_lens.training.evaluate.composition_gap`), 194,625 prompts. For
the paper model the table forward answers them in about 2 s; for a planted model of three layers or
several heads the plain forward takes up to 90 s on one core (88 s for test_locate's 3x2 plant), once
per model. The tests' planted models (tests/unit/test_locate.py's ``plant``, experiments/zoo_planted.py)
compute the paper model's function by construction, and what they test is where the roles are found,
not that gate.

:func:`takes_the_papers_gate` checks the construction on a random sample of each exhaustive set and,
where the plant gives the paper model's answer on every sampled prompt, gives it the paper model's
exhaustive accuracies (through :meth:`~compose_lens.training.subject.Subject.once`, as if it had
computed them). The gate's decision is then the one the full evaluation would give: with no
disagreement in n sampled prompts, the share of a set where the two models differ is below 3 / n at
95 % (the rule of three), and the check asks the paper model's accuracy to clear the headline by that
much (0.994 and 0.993 against 0.98, with 3 / 2,000 = 0.0015).
"""

from __future__ import annotations

import torch

from compose_lens.core.study import HEADLINE
from compose_lens.data.sampler import EXHAUSTIVE_NAMES, make_exhaustive
from compose_lens.training.evaluate import answer_logits, exhaustive_accuracies, predictions

SAMPLE = 2000  # prompts per exhaustive set (the 0-var set has 1,045: all of them)


def takes_the_papers_gate(subject, paper, n: int = SAMPLE, seed: int = 0) -> bool:
    """Whether ``subject`` (a plant on ``paper``'s split) answered as ``paper`` on ``n`` sampled prompts of
    each exhaustive set; if so it now holds the paper's exhaustive accuracies for ``seed``. If not,
    nothing is given: its gate is evaluated in full where it is asked for."""
    assert subject.split is paper.split, "a plant reads its gate on the paper model's split"
    found = exhaustive_accuracies(paper, seed)
    g = torch.Generator().manual_seed(seed)
    for name in EXHAUSTIVE_NAMES:
        tokens = make_exhaustive(paper.split, name, seed).tokens
        rows = torch.randperm(len(tokens), generator=g)[:n]
        bound = 0.0 if len(rows) == len(tokens) else 3 / len(rows)
        answers = [predictions(answer_logits(x.model, x.config.model, tokens[rows])) for x in (paper, subject)]
        if not torch.equal(*answers) or found[name]["accuracy"] - bound < HEADLINE:
            return False
    subject.once("exhaustive", seed, lambda: {k: (v["correct"], v["total"]) for k, v in found.items()})
    return True
