"""Layer 5: what is drawn: the figures (matplotlib), their styles, and the circuitsvis and circuit pages."""
