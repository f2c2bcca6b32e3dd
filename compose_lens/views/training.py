"""The phase onsets as every figure over training marks them: their colours (:data:`PHASE_STYLE`, read by the
sweep figures too) and the dashed lines at their steps (:func:`mark_phases`). The dynamics figures themselves
are in :mod:`compose_lens.registry.dynamics.figure`, the LLC's in :mod:`compose_lens.registry.llc.figure`.
"""

from __future__ import annotations

from typing import Mapping

from matplotlib.axes import Axes

# phase onsets: Okabe-Ito sky blue, reddish purple and grey (colour-blind safe, and apart from the
# four colours the curves use)
PHASE_STYLE = {"addition": ("#56B4E9", "addition"),
               "assignment": ("#CC79A7", "assignment"),
               "refinement": ("#666666", "refinement")}


def mark_phases(ax: Axes, phases: Mapping | None, label: bool = True) -> None:
    """Dashed vertical lines at the phase onsets of a ``phases.json`` ``phases`` entry."""
    for name, phase in (phases or {}).items():
        if phase.get("step") is None:
            continue
        color, text = PHASE_STYLE.get(name, ("gray", name))
        ax.axvline(phase["step"], color=color, ls="--", lw=1.2, alpha=0.8,
                   label=f"{text} ({phase['step']})" if label else None)
