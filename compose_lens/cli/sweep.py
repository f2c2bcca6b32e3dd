"""``compose-lens sweep``: one training run per (value, seed) of a setting, and its thresholds."""

from __future__ import annotations

import argparse
import sys

from compose_lens.cli.common import add_outputs, print_json, run_config_from_args, seed
from compose_lens.cli.train import add_device_options, with_device_options
from compose_lens.core.config import SWEEP_BACKENDS
from compose_lens.core.errors import ComposeLensError


def _cmd_sweep(args) -> int:
    from compose_lens.sweep.slurm import parse_options
    from compose_lens.sweep import parse_values, run_sweep
    from compose_lens.data.safety import check_out_name

    check_out_name(args.out)
    base = with_device_options(run_config_from_args(args), args)
    if args.steps is not None:
        if args.param.rsplit(".", 1)[-1] == "steps":  # each point's value would win: --steps said nothing
            raise ComposeLensError(f"--steps {args.steps} with --param {args.param}: the swept values set each "
                                   f"point's steps; drop --steps")
        base = base.with_overrides([f"train.steps={args.steps}"])
    if args.address and args.backend != "ray":
        raise ComposeLensError("--address is for --backend ray")
    result = run_sweep(base, args.param, parse_values(args.values), args.seeds, args.out,
                       backend=args.backend, workers=args.workers, threads=args.threads,
                       address=args.address, progress=not args.quiet, runs_per_process=args.runs_per_process,
                       gpus_per_point=args.gpus_per_point, slurm=parse_options(args.slurm),
                       points_per_job=args.points_per_job, overwrite=args.overwrite)
    failed = [row for row in result.rows if row["status"] == "failed"]
    if args.json:
        print_json({"param": args.param, "rows": result.rows, "trained": result.trained, "skipped": result.skipped,
                    "failed": result.failed, "wall_s": result.wall_s, "thresholds": result.threshold_lines(args.param),
                    "out": str(result.directory)})
        return 1 if failed or result.failed else 0
    print(f"sweep over {args.param}: {len(result.rows)} points ({result.trained} trained, "
          f"{result.skipped} already finished, {result.failed} failed) in {result.wall_s:.1f} s")
    for line in result.threshold_lines(args.param):
        print("  " + line)
    print(f"results: {result.directory / 'results.csv'}, {result.directory / 'thresholds.json'}, "
          f"{result.directory / 'sweep.png'}")
    for row in failed:  # on stderr, where a failure belongs (a diverged point is one)
        sys.stderr.write(f"compose-lens: error: point {args.param}={row['value']} seed {row['seed']} failed: "
                         f"{' '.join(str(row['error']).split())}\n")
    if failed:
        sys.stderr.write(f"compose-lens: error: {len(failed)} of {len(result.rows)} points failed; run the same "
                         f"command again to retry them\n")
    return 1 if failed or result.failed else 0


def _runs_per_process(value: str) -> int | str:
    """``--runs-per-process``: a whole number, or auto."""
    if value == "auto":
        return value
    try:
        return int(value)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{value!r}: give a whole number of points (4), or auto") from None


def register(subparsers) -> None:
    p = subparsers.add_parser(
        "sweep", help="train one run per (value, seed) of a setting; accuracy and threshold against it",
        description="Train one run per value x seed of a setting (f, r or any config key), in parallel, "
                    "resumable; write results.csv, thresholds.json and sweep.png. Run the same command "
                    "again to finish an interrupted sweep.")
    p.add_argument("--param", required=True, help="the swept setting: f, r, or any config key (e.g. train.lr)")
    p.add_argument("--values", required=True, nargs="+",
                   help="values (JSON), or start:stop:num for evenly spaced ones, e.g. 0.05:1:20")
    p.add_argument("--seeds", nargs="+", type=seed, default=[0],
                   help="seeds; each sets the split, data order and initial weights (default: 0)")
    p.add_argument("--steps", type=int, help="training steps per point (default: the config's)")
    p.add_argument("--config", help="base run config JSON")
    p.add_argument("--set", action="append", metavar="KEY=VALUE",
                   help="override a base setting, e.g. --set r=1 --set eval_every=500")
    add_outputs(p, "sweep directory (the same command again finishes an interrupted sweep; --overwrite starts "
                   "it afresh)", device=False, overwrite_what="sweep directory and every run in it")
    add_device_options(p)
    p.add_argument("--backend", choices=SWEEP_BACKENDS, default="local",
                   help="local: worker processes on this machine; ray: tasks on a Ray cluster; slurm: one "
                        "SLURM job array through submitit (docs/cluster.md)")
    p.add_argument("--workers", type=int, help="parallel points (default: one per core)")
    p.add_argument("--threads", type=int, help="torch threads per point (default: cores / workers)")
    p.add_argument("--runs-per-process", type=_runs_per_process, default=1, metavar="K",
                   help="train up to K compatible points together in one process (one batched model; numbers "
                        "equal to float rounding, not bit-for-bit; auto: the K a short probe of this machine "
                        "finds fastest, recorded in sweep.json; default: 1)")
    p.add_argument("--address", help="Ray cluster address (ray backend; default: start a local Ray)")
    p.add_argument("--gpus-per-point", type=float, default=0, metavar="G",
                   help="ray backend: GPUs each point asks Ray for, a fraction to share one (0.25: four points "
                        "per GPU); each point trains on the GPU Ray gives it (with --set device=cuda; default: 0)")
    p.add_argument("--slurm", action="append", metavar="KEY=VALUE",
                   help="slurm backend: a setting of submitit's executor, e.g. --slurm slurm_partition=gpu "
                        "--slurm timeout_min=120 --slurm slurm_array_parallelism=20; cluster=local runs the "
                        "jobs as processes here")
    p.add_argument("--points-per-job", type=int, metavar="N",
                   help="slurm backend: points one job trains, one group after another (default: --runs-per-process)")
    p.set_defaults(func=_cmd_sweep)
