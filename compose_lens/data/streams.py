"""Every random stream of the package, named in one table.

The same seed gives the same numbers, and two consumers of one seed never share
random draws: each draws from its own *stream* (:func:`derived_generator` turns
``(seed, stream, index)`` into an independent ``torch.Generator``), so each can change
without shifting the others. The ids below are the values the results were produced
with. A new consumer takes the next free id in its decade and adds a line here and a
constant below (tests/unit/test_weights.py checks that they agree and are distinct).

=======================  ====  ==========================================================
name                     id    consumer (``index`` in brackets)
=======================  ====  ==========================================================
``TRAIN_BATCHES``        2     ``TrainingSampler`` (block of steps)
``POOLS``                3     ``make_pool`` (pool's position in ``pool_names(task)``)
``EXHAUSTIVE``           4     ``make_exhaustive`` (position in ``EXHAUSTIVE_NAMES``)
``FORBIDDEN_SLOTS``      7     ``registry.dynamics.checkpoints.forbidden_slot_batches`` (slot)
``DATA_SAMPLE``          9     ``compose-lens data sample --split train``
``DECLARED_SAMPLE``      10    ``evaluate --prompts``: the declared training distribution's sample
``PROBE_TEST_SPLIT``     21    ``analysis.probes.fit_linear_probe``: held-out sequences
``OPERAND_GRID``         22    ``analysis.fourier`` grids (kind; 10 + kind for contexts)
``PATCH_PAIRS``          40    ``data.pairs.make_prompt_pairs`` (corruption)
``ABLATION_REFERENCE``   50    ``registry.ablation.ablations.reference_tokens``
``ABLATION_RESAMPLE``    51    ``registry.ablation.ablations`` resample ablation at ``=``
``SAME_MLP``             60    ``registry.same_mlp.comparisons`` (0 / 1: left / right prompts)
``SAME_MLP_TESTS``       61    ``registry.same_mlp.comparisons`` tests that can fail (0-9: prompt sets,
                               10: donor pairings, 11: control positions, 12: bootstrap)
=======================  ====  ==========================================================

The split follows the study's procedure with Python's ``random`` (:mod:`compose_lens.data.split`;
ids 0 and 1 stay unused). The patching bootstrap, the resample ablation hooks and the same-MLP
cosines' mismatched partners use the seed itself (:func:`seeded_generator`), and the probe batch
draws its pools with ``seed + PROBE_POOL_SEED_OFFSET``, so they are not the evaluation pools.
"""

from __future__ import annotations

import torch

TRAIN_BATCHES = 2
POOLS = 3
EXHAUSTIVE = 4
FORBIDDEN_SLOTS = 7
DATA_SAMPLE = 9
DECLARED_SAMPLE = 10
PROBE_TEST_SPLIT = 21
OPERAND_GRID = 22
PATCH_PAIRS = 40
ABLATION_REFERENCE = 50
ABLATION_RESAMPLE = 51
SAME_MLP = 60
SAME_MLP_TESTS = 61

PROBE_POOL_SEED_OFFSET = 7919  # no stream (see the module docstring)


def derived_generator(seed: int, stream: int, index: int = 0) -> torch.Generator:
    """A torch generator for one named stream of one seed (stable across runs)."""
    g = torch.Generator()
    g.manual_seed((seed * 1_000_003 + stream * 10_007 + index) % (2**63 - 1))
    return g


def seeded_generator(seed: int) -> torch.Generator:
    """A torch generator seeded with ``seed`` itself (the draws the module docstring names)."""
    return torch.Generator().manual_seed(seed)
