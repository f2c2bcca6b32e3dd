"""The study's published numbers, in one place: what "Assign and Add" (arXiv 2605.31497) reports.

Everything the toolkit compares a run against comes from here, so a number of the study is written
once. Numbers (:data:`HEADLINE`, :data:`THRESHOLDS`) are what the code tests against; strings
(:data:`CLAIMS`, :data:`PHASES`) are how the study states them, for printing beside a run's own value.
The study reads its phases from figures, so they are approximate ("~6k"); compose-lens's own phase
rule is :data:`compose_lens.training.phases.PHASE_RULES`.

>>> HEADLINE
0.98
>>> THRESHOLDS["f"]
('zero_var_heldout', 0.25)
"""

from __future__ import annotations

# The headline: both exhaustive accuracies at least this (the study: "over 98 %").
HEADLINE = 0.98

# The study's setting: modulus, data parameters and training budget of its one run.
SETTING = {"p": 59, "f": 0.7, "r": 1.0, "steps": 30_000}

# The headline as the study states it, keyed by compose-lens's exhaustive accuracy names.
CLAIMS = {
    "zero_var_heldout": "> 98 % at its f = 0.7 (generalises for f >~ 0.25)",
    "two_var_union": "> 98 %",
}

# The onsets of the three learning phases, read from the study's figures.
PHASES = {"addition": "~4.5k", "assignment": "~6k", "refinement": "~14k-16k"}

# The thresholds of its Figure 3: parameter -> (the accuracy it was read from, value).
THRESHOLDS = {"f": ("zero_var_heldout", 0.25), "r": ("two_var_union", 0.2)}
