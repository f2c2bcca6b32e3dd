"""What is drawn, from numbers: what every figure needs (matplotlib), their styles, and the figures of
training and sweeps.

:mod:`~compose_lens.views.drawing` makes, writes and shares what every figure needs (the palette,
the layer names, the one heatmap, :func:`~compose_lens.views.drawing.save`, the background
:class:`~compose_lens.views.drawing.Renderer`); the others draw
training and sweeps across runs. Every analysis draws its own figures in its folder of
:mod:`compose_lens.registry`. :mod:`~compose_lens.views.figure_style` holds the report and paper styles.
"""
