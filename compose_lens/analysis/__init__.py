"""The measures several analyses share: where each mechanism of the circuit is measured.

The study's claim is a chain of mechanisms; each is measured by functions of a module here, which the
analyses (one folder each in :mod:`compose_lens.registry`) read (paper layer 1 = ``blocks.0``, layer 2 =
``blocks.1``):

====================================  ===========================================  ==========================
mechanism (SPEC section 6)            question                                     measured in
====================================  ===========================================  ==========================
1. previous-token head (layer 1)      is each value tagged with its variable?      :mod:`.probes`
2. ``=`` gathers the operands (l. 1)  does ``=`` read the two operand tokens?       :mod:`.probes`
3. variable-identity routing (l. 2)   does ``=`` find the values of its operands?  :mod:`.probes`
4. the MLP adds (layer 2)             key frequencies, restricted/excluded loss    :mod:`.fourier`
5. same MLP for constants/variables   correlational and causal comparisons         ``registry/same_mlp/``
6. patching and ablation              which sites matter, for which pools          ``registry/patching/``, ``registry/ablation/``
====================================  ===========================================  ==========================

Supporting modules:

* :mod:`.locate`: which head binds, which routes and which MLP adds in *any*
  architecture (the table above names the paper's components); the Fourier
  analyses read the located adder;
* :mod:`.activations`: the activations all probes read, in one forward pass, and the attention patterns;
* :mod:`.metrics`: the patching metrics; :mod:`.thresholds`: the f and r thresholds of a sweep;
* :mod:`.exploratory`: one prompt, or a head's detection, asked of any model.

Everything here returns numbers (tensors, DataFrames, dicts) and imports nothing of the registry: each
analysis is declared, with its outputs, figures and tests, in its folder of :mod:`compose_lens.registry`
(``docs/extending.md``).
"""
