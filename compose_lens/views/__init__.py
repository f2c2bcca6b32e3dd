"""What is drawn, from numbers: the study's figures (matplotlib), one module per subject, their styles, and
the pages that open offline.

:mod:`~compose_lens.views.drawing` makes, writes and shares what every figure needs (the palette,
the layer names, the one heatmap, :func:`~compose_lens.views.drawing.save`, the background
:class:`~compose_lens.views.drawing.Renderer`); the others draw one subject each: training,
the Fourier features, patching, the circuit graph, and sweeps across runs (an analysis kept whole in a
folder of :mod:`compose_lens.registry` draws its figure there: DAS, the LLC, the gradient terms, the answer
lens, attention and QK, the same MLP, ablation, direct logit attribution).
:mod:`~compose_lens.views.figure_style` holds the report and paper styles; :mod:`~compose_lens.views.circuit_view`
makes the circuit's interactive page.
"""
