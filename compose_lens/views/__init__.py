"""The study's figures, drawn with matplotlib from numbers, one module per subject.

:mod:`~compose_lens.views.drawing` makes, writes and shares what every figure needs (the palette,
the layer names, the one heatmap, :func:`~compose_lens.views.drawing.save`, the background
:class:`~compose_lens.views.drawing.Renderer`); the others draw one subject each: training,
attention and QK, the Fourier features, the same MLP, patching and ablation, the circuit graph,
direct logit attribution, the gradient terms, and sweeps across runs.
"""
