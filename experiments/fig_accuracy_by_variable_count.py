"""Figure: accuracy of the nine pools over training, by variable count, with the phase onsets.

    python experiments/fig_accuracy_by_variable_count.py RUN_OR_REFERENCE_DIR --out figures
"""

from pathlib import Path

from compose_lens.figures import accuracy_by_variable_count_figure, dynamics_of, experiment_parser, save

args = experiment_parser(__doc__.splitlines()[0], step=False).parse_args()
table, doc = dynamics_of(args)
for path in save(*accuracy_by_variable_count_figure(table, doc["phases"]), Path(args.out) / "accuracy_by_variable_count"):
    print(f"wrote {path}")
