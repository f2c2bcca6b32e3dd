"""Figure: attention patterns of both layers on one example, operand / value / previous-token cells marked.

    python experiments/fig_attention_patterns.py RUN_OR_REFERENCE_DIR [--step N] \
        [--sequence "b=7, e=5, d=2, b+23=?"] --out figures
"""

from compose_lens.cli.experiments import experiment_parser, model_of, save_figure
from compose_lens.registry.attention.sequences import sequence_views
from compose_lens.data.sampler import example_sequences
from compose_lens.registry.attention.figure import view_figure

parser = experiment_parser(__doc__.splitlines()[0])
parser.add_argument("--sequence", help="readable sequence (default: a 2-var sequence from the pools)")
args = parser.parse_args()
loaded = model_of(args)
text = args.sequence or example_sequences(loaded.split)[2]
name = "attention_patterns" + (f"_step{args.step}" if args.step is not None else "")
save_figure(view_figure(sequence_views(loaded.model, loaded.config, [text])[0]), args, name)
