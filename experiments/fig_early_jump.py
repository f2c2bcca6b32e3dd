"""Figure: the early generalisation jump, layer-1 attention on one example and the layer-2 identity
matrix just before and just after the variable-assignment jump.

    python experiments/fig_early_jump.py RUN_OR_REFERENCE_DIR [--before N --after M] [--sequence S] --out figures

Without --before/--after the bracket of the assignment phase found by `compose-lens dynamics` is used.
"""

from compose_lens.training.runs import find_checkpoints
from compose_lens.cli.experiments import dynamics_of, experiment_parser, save_figure
from compose_lens.registry.early_jump.jump import jump_states
from compose_lens.data.sampler import example_sequences
from compose_lens.registry.early_jump.figure import early_jump_figure

parser = experiment_parser(__doc__.splitlines()[0], step=False)
parser.add_argument("--before", type=int, help="checkpoint step before the jump")
parser.add_argument("--after", type=int, help="checkpoint step after the jump")
parser.add_argument("--sequence", help="readable sequence (default: a 1-var sequence from the pools)")
args = parser.parse_args()
table, doc = dynamics_of(args)
before, after = args.before, args.after
if before is None or after is None:
    bracket = doc["phases"]["assignment"]["bracket"]
    if not bracket:
        raise SystemExit("no assignment jump found in the dynamics; pass --before and --after")
    before, after = bracket
split = find_checkpoints(args.source, args.split)[2]
text = args.sequence or example_sequences(split)[1]
figure = early_jump_figure(*jump_states(args.source, before, after, text, table, args.split))
save_figure(figure, args, "early_jump")
