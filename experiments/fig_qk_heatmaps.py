"""Figure: layer-1 positional QK (previous-token head) and layer-2 variable-identity QK heatmaps.

    python experiments/fig_qk_heatmaps.py RUN_OR_REFERENCE_DIR [--step N] --out figures
"""

from compose_lens.cli.experiments import experiment_parser, model_of, save_figure
from compose_lens.registry.qk.figure import qk_heatmaps_figure
from compose_lens.registry.qk.matrices import qk_matrices

args = experiment_parser(__doc__.splitlines()[0]).parse_args()
loaded = model_of(args)
figure = qk_heatmaps_figure(*qk_matrices(loaded.model, loaded.config), loaded.config.task.variable_names,
                            title=loaded.source)
name = "qk_heatmaps" + (f"_step{args.step}" if args.step is not None else "")
save_figure(figure, args, name)
