"""A Hugging Face tokenizer for the task's vocabulary, so TransformerLens's string helpers work.

The task has no subwords: every token is one word of the token form (:mod:`compose_lens.data.task`):
the numbers ``0``..``p-1``, ``+``, ``=``, ``PAD`` and the variables ``a``, ``b``, ... So the tokenizer
is a ``tokenizers`` **WordLevel** model (the task's ids) after a whitespace split, wrapped in
``transformers.PreTrainedTokenizerFast``, built in memory from the task configuration.
:func:`model.tl.boot <compose_lens.model.tl.boot>` attaches it to every model, so on a loaded model::

    model.to_tokens("PAD b 7 PAD e 5 PAD d 2 PAD PAD PAD + b 23 =")   # (1, 16), no BOS
    model.to_tokens("b=7, e=5, d=2, b+23=?")                          # the same row (left padding)
    model.to_str_tokens(tokens)                                        # ['PAD', 'b', '7', ...]
    model.to_string(tokens)                                            # 'PAD b 7 ... + b 23 ='

**Two input forms.** A string with a comma or a question mark is the short readable form, parsed by
:func:`~compose_lens.data.task.parse_sequence` (a whole, valid sequence; padding on the left). Anything
else is the token form, one word per token, and may be a fragment (``"b 7"``); an unknown word is refused
with one line naming it. There is no BOS token: a sequence is exactly the 16 task tokens.

>>> from compose_lens.core.config import TaskConfig
>>> tok = task_tokenizer(TaskConfig())
>>> tok("b=7, b+23=?")["input_ids"][-5:]
[7, 59, 63, 23, 60]
>>> tok.decode(tok("PAD b 7 + b 23 =")["input_ids"])
'PAD b 7 + b 23 ='
"""

from __future__ import annotations

from tokenizers import Tokenizer, decoders, models, pre_tokenizers
from transformers import PreTrainedTokenizerFast

from compose_lens.core.config import TaskConfig
from compose_lens.data.task import parse_sequence, to_token_string, token_id, token_name


def vocabulary(task: TaskConfig) -> dict[str, int]:
    """Word -> id for every token of the task (ids 0..d_vocab-1)."""
    return {token_name(task, t): t for t in range(task.d_vocab)}


def to_token_form(task: TaskConfig, text: str) -> str:
    """The token form of ``text``: the readable form parsed, the token form checked word by word.

    >>> to_token_form(TaskConfig(), "b=7, b+23=?").split()[-6:]
    ['b', '7', '+', 'b', '23', '=']
    """
    if "," in text or "?" in text:
        return to_token_string(task, parse_sequence(task, text))
    for word in text.split():
        token_id(task, word)  # raises SequenceError naming a bad word
    return " ".join(text.split())


class TaskTokenizer(PreTrainedTokenizerFast):
    """The WordLevel tokenizer that also accepts the short readable form (module docstring)."""

    def __init__(self, task: TaskConfig, **kwargs):
        backend = Tokenizer(models.WordLevel(vocabulary(task), unk_token=None))
        backend.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
        backend.decoder = decoders.WordPiece(prefix="##", cleanup=False)  # joins words with spaces
        super().__init__(tokenizer_object=backend, pad_token="PAD", padding_side="left",
                         model_max_length=task.seq_len, **kwargs)
        self.task = task

    def _encode_plus(self, text, text_pair=None, **kwargs):
        if isinstance(text, str):
            text = to_token_form(self.task, text)
        elif isinstance(text, (list, tuple)) and text and isinstance(text[0], str) \
                and not kwargs.get("is_split_into_words"):
            text = [to_token_form(self.task, t) for t in text]
        return super()._encode_plus(text, text_pair, **kwargs)


def task_tokenizer(task: TaskConfig) -> TaskTokenizer:
    """The tokenizer of ``task`` (built in memory, a few milliseconds)."""
    return TaskTokenizer(task)
