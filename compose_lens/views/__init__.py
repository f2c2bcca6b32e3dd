"""What is drawn, from numbers: the study's figures (matplotlib), one module per subject, their styles, and
the pages that open offline.

:mod:`~compose_lens.views.drawing` makes, writes and shares what every figure needs (the palette,
the layer names, the one heatmap, :func:`~compose_lens.views.drawing.save`, the background
:class:`~compose_lens.views.drawing.Renderer`); the others draw one subject each: training,
attention, the Fourier features, the same MLP, ablation, and sweeps across runs (an analysis kept whole in a
folder of :mod:`compose_lens.registry` draws its figure there: DAS, the LLC, the gradient terms, the answer lens,
patching, the circuit graph and its interactive page). :mod:`~compose_lens.views.figure_style` holds the report
and paper styles; :mod:`~compose_lens.views.attention_view` makes the circuitsvis attention views.
"""
