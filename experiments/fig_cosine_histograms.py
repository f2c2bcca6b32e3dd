"""Figure: cosine similarity of the MLP2 input, a constant operand against the same value through a
variable (matched) and against other values (mismatched).

    python experiments/fig_cosine_histograms.py RUN_OR_REFERENCE_DIR [--step N] [--n 1000] --out figures
"""

from compose_lens.cli.experiments import experiment_parser, model_of, save_figure
from compose_lens.registry.same_mlp.figure import cosine_histograms_figure
from compose_lens.registry.same_mlp.comparisons import cosine_groups

parser = experiment_parser(__doc__.splitlines()[0])
parser.add_argument("--n", type=int, default=1000, help="prompt pairs per side")
args = parser.parse_args()
loaded = model_of(args)
figure = cosine_histograms_figure(cosine_groups(loaded, n=args.n))
save_figure(figure, args, "cosine_histograms")
