"""Figure: the late refinement, the layer-1 = query's score per variable key over training and the
accuracy of each forbidden operand slot (b as the right operand is learned last).

    python experiments/fig_late_refinement.py RUN_OR_REFERENCE_DIR --out figures
"""

from compose_lens.cli.experiments import dynamics_of, experiment_parser, save_figure
from compose_lens.registry.dynamics.figure import refinement_figure
from compose_lens.core.config import RunConfig

args = experiment_parser(__doc__.splitlines()[0], step=False).parse_args()
table, doc = dynamics_of(args)
task = RunConfig.from_dict(doc["config"]).task
figure = refinement_figure(table, task.variable_names, tuple(task.left_forbidden) + tuple(task.right_forbidden),
                           doc["phases"])
save_figure(figure, args, "late_refinement")
