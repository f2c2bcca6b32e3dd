"""Analyses of a trained model: where each mechanism of the circuit is measured.

The study's claim is a chain of four mechanisms; each has a module, and each
measure is one function (paper layer 1 = ``blocks.0``, layer 2 = ``blocks.1``):

====================================  ===========================================  ==========================
mechanism (SPEC section 6)            question                                     module
====================================  ===========================================  ==========================
1. previous-token head (layer 1)      is each value tagged with its variable?      :mod:`.probes`
2. ``=`` gathers the operands (l. 1)  does ``=`` read the two operand tokens?       :mod:`.probes`
3. variable-identity routing (l. 2)   does ``=`` find the values of its operands?  :mod:`.probes`
4. the MLP adds (layer 2)             key frequencies, restricted/excluded loss    :mod:`.fourier`
5. same MLP for constants/variables   correlational and causal comparisons         :mod:`~compose_lens.registry.same_mlp`
6. patching and ablation              which sites matter, for which pools          :mod:`.patching`, :mod:`~compose_lens.registry.ablation`
====================================  ===========================================  ==========================

Supporting modules:

* :mod:`.locate`: which head binds, which routes and which MLP adds in *any*
  architecture (the table above names the paper's components); the Fourier
  analyses read the located adder;
* :mod:`.activations`: the activations all probes read, in one forward pass (a
  table-based forward for the paper architecture, ``run_with_cache`` otherwise);
* :mod:`.summary`: :func:`~.summary.circuit_measures` (cheap floats per
  checkpoint, for training dynamics) and :func:`~.summary.circuit_summary`
  (the full picture of one model);
* :mod:`.thresholds`: the f and r thresholds of a sweep;
* :mod:`.figure_data`: the numbers behind the study's model figures.

Which of these ``compose-lens analyze`` runs, with which settings, and what each writes, shows
in the report and exports is declared once per analysis in :mod:`compose_lens.registry`. These modules
are the numbers several analyses share (the locator reads the probes and the Fourier grids); an
analysis whose numbers nothing else reads is kept whole, numbers to tests, in a folder of the registry
(``registry/answer_lens/``, DAS, the LLC, the gradient terms, attention entropy, the variant reading,
direct logit attribution, the training dynamics, the early jump, the QK circuits, modularity, the same-MLP
tests, ablation, the attention views: ``docs/extending.md``).

Everything here returns numbers (tensors, DataFrames, dicts): files are written by
:mod:`compose_lens.training.runs` and :mod:`compose_lens.report`, figures drawn by
:mod:`compose_lens.views`.
"""
