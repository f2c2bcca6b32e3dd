"""Figure: the circuit's progress measures over training, with the phase boundaries.

    python experiments/fig_progress_measures.py RUN_OR_REFERENCE_DIR --out figures
"""

from pathlib import Path

from compose_lens.figures import dynamics_of, experiment_parser, progress_measures_figure, save

args = experiment_parser(__doc__.splitlines()[0], step=False).parse_args()
table, doc = dynamics_of(args)
for path in save(*progress_measures_figure(table, doc["phases"]), Path(args.out) / "progress_measures"):
    print(f"wrote {path}")
