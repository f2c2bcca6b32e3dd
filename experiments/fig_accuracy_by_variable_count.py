"""Figure: accuracy of the nine pools over training, by variable count, with the phase onsets.

The run's outcome (generalised, stalled, learning) is in the title where phases.json records it.

    python experiments/fig_accuracy_by_variable_count.py RUN_OR_REFERENCE_DIR --out figures
"""

from compose_lens.cli.experiments import dynamics_of, experiment_parser, save_figure
from compose_lens.registry.dynamics.figure import accuracy_by_variable_count_figure

args = experiment_parser(__doc__.splitlines()[0], step=False).parse_args()
table, doc = dynamics_of(args)
save_figure(accuracy_by_variable_count_figure(table, doc["phases"], doc.get("outcome")), args,
            "accuracy_by_variable_count")
