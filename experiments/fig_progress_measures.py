"""Figure: the circuit's progress measures over training, with the phase boundaries.

    python experiments/fig_progress_measures.py RUN_OR_REFERENCE_DIR --out figures
"""

from compose_lens.cli.experiments import dynamics_of, experiment_parser, save_figure
from compose_lens.registry.dynamics.figure import progress_measures_figure

args = experiment_parser(__doc__.splitlines()[0], step=False).parse_args()
table, doc = dynamics_of(args)
save_figure(progress_measures_figure(table, doc["phases"]), args, "progress_measures")
