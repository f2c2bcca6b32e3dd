"""TransformerLens's two quick looks at a model, ``test_prompt`` and ``detect_head``, for the study's models.

TransformerLens has two functions a researcher reaches for first on a new model:
``transformer_lens.utilities.test_prompt`` (how likely is the right answer to a prompt, and what
does the model prefer) and ``transformer_lens.head_detector.detect_head`` (how much each head
looks like a previous-token, duplicate-token or induction head). Neither runs on a study's model:

* ``test_prompt`` appends the answer to the prompt and reads the logits one position earlier,
  but a study's sequence already fills the context (``n_ctx`` = 16: the right-aligned context,
  then ``+ LHS RHS =``), so the longer input is refused; and the answer is not a token of the
  input vocabulary's tokenizer but one of the ``d_vocab_out`` = p answer classes.
* ``detect_head`` refuses a sequence as long as the context (it asks for fewer than ``n_ctx``
  tokens), and would score the padding that every sequence starts with.

The two functions here keep TransformerLens's semantics (its printout, its rank, its scoring) on
the study's form: the answer is read at ``=`` over the p answers, and the padding is left out of a
head's score by default.

>>> from compose_lens.training.subject import load_model
>>> paper = load_model("paper")
>>> test_prompt(paper, "b=7, b+23=?", print_details=False).rank   # 30: the model's first choice
0
>>> scores = detect_head(paper, ["b=7, e=5, b+23=?", "c=3, a=40, 4+c=?"], "previous_token")
>>> scores.shape, bool(scores[0, 0] > 0.5)   # (layer, head): layer 1's head reads the previous token
(torch.Size([2, 1]), True)
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Sequence

import pandas as pd
import torch

from compose_lens.analysis import metrics
from compose_lens.analysis.activations import attention_patterns
from compose_lens.data.task import SequenceError, decode, parse_sequence, token_name
from compose_lens.core.errors import ComposeLensError
from compose_lens.training.evaluate import answer_logits
from compose_lens.model import tl
from compose_lens.training.subject import load_subject
from compose_lens.training.subject import Subject

if TYPE_CHECKING:
    from jaxtyping import Float

ERROR_MEASURES = ("mul", "abs")  # TransformerLens's ErrorMeasure


@dataclass(frozen=True)
class PromptTest:
    """What :func:`test_prompt` found: the answer's rank (0: the model's first choice), logit and
    probability over the p answers, and the ``top_k`` answers, best first (rank, answer, logit, prob)."""

    prompt: str
    tokens: tuple[str, ...]
    answer: int
    rank: int
    logit: float
    prob: float
    top: pd.DataFrame


def _subject(model: Subject | str | Path) -> Subject:
    return model if isinstance(model, Subject) else load_subject(model)


def _tokens(subject: Subject, prompt: str) -> list[int]:
    try:
        return parse_sequence(subject.task, prompt)
    except SequenceError as error:
        raise ComposeLensError(f"{prompt!r}: {error}") from None


def test_prompt(model: Subject | str | Path, prompt: str, answer: int | str | None = None, top_k: int = 10,
                print_details: bool = True) -> PromptTest:
    """TransformerLens's ``test_prompt`` on a study's sequence: the rank, logit and probability of
    ``answer`` (default: the task's right answer to ``prompt``) among the p answers at ``=``, and
    the ``top_k`` answers, printed (``print_details``) and returned.

    ``model`` is a loaded model (:func:`compose_lens.load_model`, :func:`compose_lens.load_subject`)
    or what those load (``"paper"``, a run or checkpoint); ``prompt`` either readable form. The rank is
    TransformerLens's: 0 is the model's first choice.
    """
    subject = _subject(model)
    tokens = _tokens(subject, prompt)
    task = subject.task
    if answer is None:
        answer = decode(task, tokens).label
    elif not str(answer).strip().isdigit() or not 0 <= int(answer) < task.modulus:
        raise ComposeLensError(f"answer {answer!r}: give a number from 0 to {task.modulus - 1}")
    answer = int(answer)
    if top_k < 1:
        raise ComposeLensError(f"top_k={top_k}: give at least 1")
    logits = answer_logits(subject.model, subject.config.model, torch.tensor([tokens]))[0]
    every = torch.arange(task.modulus)
    probs = metrics.prob(logits.expand(task.modulus, -1), torch.stack([every, every], 1))  # of each answer
    order = probs.argsort(descending=True)
    rank = int(order.argsort()[answer])  # TransformerLens's rank: the answer's place in that order
    top = pd.DataFrame([{"rank": r, "answer": int(a), "logit": float(logits[a]), "prob": float(probs[a])}
                        for r, a in enumerate(order[:top_k].tolist())])
    found = PromptTest(prompt, tuple(token_name(task, t) for t in tokens), answer, rank,
                       float(logits[answer]), float(probs[answer]), top)
    if print_details:
        print("Tokenized prompt:", list(found.tokens))
        print("Performance on answer token:")
        print(f"Rank: {rank:<8} Logit: {found.logit:5.2f} Prob: {found.prob:6.2%} Token: |{answer}|")
        for row in top.itertuples():
            print(f"Top {row.rank}th token. Logit: {row.logit:5.2f} Prob: {row.prob:6.2%} Token: |{row.answer}|")
        print(f"Ranks of the answer tokens: [('{answer}', {rank})]")
    return found


test_prompt.__test__ = False  # a library function, not a test for pytest to collect where imported


def _detection_name(name: str) -> str:
    full = name if name.endswith("_head") else f"{name}_head"
    if full not in tl.HEAD_DETECTION_NAMES:
        shown = ", ".join(n.removesuffix("_head") for n in tl.HEAD_DETECTION_NAMES)
        raise ComposeLensError(f"detection pattern {name!r}: give one of {shown}, or a (pos, pos) tensor")
    return full


def detect_head(model: Subject | str | Path, prompts: str | Sequence[str],
                detection_pattern: str | torch.Tensor, heads: Sequence[tuple[int, int]] | None = None, *,
                exclude_padding: bool = True, exclude_bos: bool = False, exclude_current_token: bool = False,
                error_measure: str = "mul") -> Float[torch.Tensor, "layer head"]:
    """TransformerLens's ``detect_head`` on a study's sequences: each head's score (layer, head)
    against ``detection_pattern``, averaged over ``prompts``.

    ``detection_pattern`` is TransformerLens's name of one (``"previous_token"``,
    ``"duplicate_token"``, ``"induction"``; the ``_head`` suffix may be given), made from each
    prompt's tokens, or a lower-triangular (n_ctx, n_ctx) tensor over the sequence's positions
    (right-aligned: the last is ``=``). ``heads`` (``[(layer, head), ...]``) scores only those;
    the others get -1, as in TransformerLens. ``exclude_padding`` scores each prompt on its
    positions after the padding (as TransformerLens would score it written without padding);
    ``exclude_bos`` then leaves out attention to the first of them, ``exclude_current_token`` the
    diagonal. ``error_measure``: ``"mul"``, the share of the head's attention on the pattern's cells, or
    ``"abs"``, one minus the mean absolute difference (TransformerLens's
    ``compute_head_attention_similarity_score``).
    """
    subject = _subject(model)
    task = subject.task
    texts = [prompts] if isinstance(prompts, str) else list(prompts)
    if not texts:
        raise ComposeLensError("no prompts: give at least one sequence, e.g. 'b=7, e=5, b+23=?'")
    if error_measure not in ERROR_MEASURES:
        raise ComposeLensError(f"error_measure={error_measure!r}: give one of {', '.join(ERROR_MEASURES)}")
    rows = torch.tensor([_tokens(subject, text) for text in texts])
    n = rows.shape[1]
    name = _detection_name(detection_pattern) if isinstance(detection_pattern, str) else None
    if name is None:
        detection_pattern = torch.as_tensor(detection_pattern, dtype=torch.float32).cpu()
        after_query = torch.arange(n)[:, None] < torch.arange(n)[None, :]  # a key after its query
        if detection_pattern.shape != (n, n) or detection_pattern[after_query].any():
            raise ComposeLensError(f"detection pattern of shape {tuple(detection_pattern.shape)}: give a "
                                   f"lower-triangular ({n}, {n}) tensor, one row per query position")
    n_layers, n_heads = subject.config.model.n_layers, subject.config.model.n_heads
    chosen = [(layer, head) for layer in range(n_layers) for head in range(n_heads)] if heads is None else list(heads)
    outside = [h for h in chosen if not (0 <= h[0] < n_layers and 0 <= h[1] < n_heads)]
    if outside:
        raise ComposeLensError(f"head {outside[0]}: the model has {n_layers} layers of {n_heads} heads "
                               f"(layer from 0 to {n_layers - 1}, head from 0 to {n_heads - 1})")
    patterns, _ = attention_patterns(subject.model, subject.config.model, rows)  # (prompt, layer, head, query, key)
    scores = torch.full((len(texts), n_layers, n_heads), -1.0)
    for i, row in enumerate(rows):
        start = int((row != task.pad_token).nonzero()[0]) if exclude_padding else 0
        detection = tl.head_detection_pattern(name, row[start:]) if name else detection_pattern[start:, start:]
        for layer, head in chosen:
            scores[i, layer, head] = tl.head_similarity(
                patterns[i, layer, head, start:, start:], detection, exclude_bos=exclude_bos,
                exclude_current_token=exclude_current_token, error_measure=error_measure)
    return scores.mean(0)
