"""analyze's findings table says whether each value agrees with what the circuit predicts: a value below its
prediction (the theory's gradient cosine of 0.052 where it predicts near 1) reads ``contradicts``, not a bare
number beside "near 1" for the reader to compare."""

import math

from compose_lens import registry
from compose_lens.cli.analysis import print_findings


def _row(printed: str, words: str) -> str:
    return next(line for line in printed.splitlines() if words in line)


def test_a_value_below_its_prediction_reads_contradicts(capsys):
    print_findings({"gradient_kept_cosine_qk0": 0.052, "prev_token_attention_score": 0.98,
                    "equals_to_operands_score": math.nan, "key_frequency_strength": 0.5})
    printed = capsys.readouterr().out
    assert "verdict" in printed.splitlines()[0]
    assert _row(printed, "layer-1 QK gradient").rstrip().endswith("contradicts")
    assert _row(printed, "each value attends to its variable").rstrip().endswith("agrees")
    assert _row(printed, "key frequencies").rstrip().endswith("agrees")  # at the threshold agrees
    assert _row(printed, "= attends to the operands").rstrip().endswith("-")  # NaN: nothing to judge


def test_every_finding_declares_the_least_value_that_agrees_and_says_it():
    findings = [f for a in registry.ANALYSES for f in a.findings]
    assert findings
    for f in findings:
        assert f.at_least is not None and f"{f.at_least:g}" in f.predicts, f
        assert (f.verdict(f.at_least), f.verdict(f.at_least - 1e-9), f.verdict("blocks.1 head 0")) == \
            ("agrees", "contradicts", "-")
