"""Optional experiment tracking for ``train``: TensorBoard or Weights & Biases, off by default.

``train.log_to`` (``--set log_to=tensorboard``) chooses where, besides ``metrics.jsonl``, each
evaluation's numbers go: the training loss (``loss/train``), the nine pool accuracies
(``accuracy/<pool>``) and the learning rate (``lr``), at the evaluation's step.

* ``none`` (the default): nothing; no tracking package is imported.
* ``tensorboard``: event files in ``RUN/tensorboard/`` (``tensorboard --logdir RUN``), written by
  ``torch.utils.tensorboard``, which needs the ``tensorboard`` package
  (``pip install tensorboard==2.21.0``, or ``pip install -e '.[methods]'``).
* ``wandb``: a Weights & Biases run in ``RUN/wandb/``, **offline** unless ``WANDB_MODE`` says
  otherwise (``wandb sync RUN/wandb/offline-run-*`` uploads it later); nothing reaches the
  network unless asked.

The package is imported only when asked for, and a missing one is refused in one line before the
run directory is touched (:func:`check_available`). Tracking never changes what is trained.
"""

from __future__ import annotations

import importlib.util
import os
from pathlib import Path
from typing import Any

from compose_lens.core.errors import ComposeLensError

TENSORBOARD_DIR, WANDB_DIR = "tensorboard", "wandb"  # inside the run directory
_PACKAGE = {"tensorboard": ("tensorboard", "pip install tensorboard==2.21.0 (or pip install -e '.[methods]')"),
            "wandb": ("wandb", "pip install wandb")}


WANDB_MODES = ("offline", "online", "disabled", "shared", "dryrun", "run")  # what wandb.init accepts as WANDB_MODE
WANDB_INIT_TIMEOUT_S = 60  # an online W&B run whose server does not answer: refused, not retried for minutes


def check_available(log_to: str) -> None:
    """Refuse, in one line, a tracker whose package is not installed (nothing is imported), or a
    ``WANDB_MODE`` that W&B would refuse only once the run directory is made."""
    if log_to == "none":
        return
    package, how = _PACKAGE[log_to]
    if importlib.util.find_spec(package) is None:
        raise ComposeLensError(f"train.log_to={log_to} needs the {package} package, which is not installed: "
                               f"{how}; or use log_to=none")
    mode = os.environ.get("WANDB_MODE", "offline")
    if log_to == "wandb" and mode not in WANDB_MODES:
        raise ComposeLensError(f"WANDB_MODE={mode!r}: W&B runs {', '.join(WANDB_MODES[:3])}; set one of those "
                               f"(offline by default), or use log_to=none")


class MetricsLogger:
    """Where each evaluation's metrics go besides ``metrics.jsonl``: nowhere (``log_to=none``)."""

    def log(self, line: dict[str, Any], lr: float) -> None:
        """One evaluation: ``line`` as appended to ``metrics.jsonl`` (step, train_loss, pools, ...)."""

    def close(self) -> None:
        """Flush and close (called once the run ends or stops)."""


def scalars(line: dict[str, Any], lr: float) -> dict[str, float]:
    """The tracked names and values of one ``metrics.jsonl`` line."""
    out = {"loss/train": float(line["train_loss"]), "lr": float(lr)}
    out.update({f"accuracy/{k}": float(v) for k, v in line.items()
                if k not in ("step", "train_loss", "elapsed_s") and isinstance(v, (int, float))})
    return out


class TensorBoardLogger(MetricsLogger):
    def __init__(self, run_dir: Path):
        from torch.utils.tensorboard import SummaryWriter

        self.writer = SummaryWriter(log_dir=str(run_dir / TENSORBOARD_DIR))

    def log(self, line: dict[str, Any], lr: float) -> None:
        for name, value in scalars(line, lr).items():
            self.writer.add_scalar(name, value, global_step=int(line["step"]))
        self.writer.flush()

    def close(self) -> None:
        self.writer.close()


class WandbLogger(MetricsLogger):
    def __init__(self, run_dir: Path, config: dict):
        import wandb

        try:
            self.run = wandb.init(project="compose-lens", name=run_dir.name, dir=str(run_dir), config=config,
                                  mode=os.environ.get("WANDB_MODE", "offline"),
                                  settings=wandb.Settings(init_timeout=WANDB_INIT_TIMEOUT_S))
        except Exception as exc:  # wandb raises its own errors (no network, a bad key): the run is not made
            detail = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
            raise ComposeLensError(f"train.log_to=wandb: W&B did not start ({detail}); try WANDB_MODE=offline, "
                                   f"or log_to=none") from None

    def log(self, line: dict[str, Any], lr: float) -> None:
        self.run.log(scalars(line, lr), step=int(line["step"]))

    def close(self) -> None:
        self.run.finish()


def metrics_logger(log_to: str, run_dir: str | Path, config: dict | None = None) -> MetricsLogger:
    """The logger ``train.log_to`` names, writing into ``run_dir``."""
    check_available(log_to)
    run_dir = Path(run_dir)
    if log_to == "tensorboard":
        return TensorBoardLogger(run_dir)
    if log_to == "wandb":
        (run_dir / WANDB_DIR).mkdir(exist_ok=True)
        return WandbLogger(run_dir, config or {})
    return MetricsLogger()
