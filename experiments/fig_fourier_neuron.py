"""Figure: the MLP2 neuron best explained by a key frequency beside its ideal cos(2 pi k (x + y) / p) pattern.

    python experiments/fig_fourier_neuron.py RUN_OR_REFERENCE_DIR [--step N] [--frequency K] --out figures
"""

from compose_lens.cli.experiments import experiment_parser, model_of, save_figure
from compose_lens.registry.fourier.features import fourier_neuron
from compose_lens.registry.fourier.figure import fourier_neuron_figure

parser = experiment_parser(__doc__.splitlines()[0])
parser.add_argument("--frequency", type=int, help="key frequency (default: the neuron fitting its ideal best)")
args = parser.parse_args()
loaded = model_of(args)
figure = fourier_neuron_figure(fourier_neuron(loaded, args.frequency))
save_figure(figure, args, "fourier_neuron")
