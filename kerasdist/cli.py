"""The command line: ``kerasdist devices | train | compare | worker | launch``."""

import argparse
import json
import sys

from kerasdist.errors import KerasdistError

EXIT_USER_ERROR = 2


def add_training_arguments(parser):
    """Options shared by ``train``, ``worker`` and ``launch`` (the DESIGN.md contract)."""
    parser.add_argument("--replicas", type=int, default=1, help="replicas on this machine (default 1)")
    parser.add_argument("--epochs", type=int, default=3,
                        help="total epochs to reach; a rerun resumes rather than adds (default 3)")
    parser.add_argument("--global-batch-size", type=int, default=64,
                        help="samples per step across all replicas (default 64)")
    parser.add_argument("--checkpoint-dir", default=None, help="checkpoints + metrics log; rerun to resume")
    parser.add_argument("--data", default="auto", help="auto | keras | sample | PATH.npz (default auto)")
    parser.add_argument("--seed", type=int, default=0, help="seeds weights, split and data order")
    parser.add_argument("--engine", default="auto", choices=("auto", "fit", "loop"),
                        help="Keras fit() or kerasdist's own loop; auto: what kerasdist doctor found "
                             "for the strategy (default auto)")
    parser.add_argument("--strategy", default=None,
                        help="default | one_device | mirrored | central_storage | multi_worker "
                             "(default: mirrored if replicas > 1)")
    parser.add_argument("--learning-rate", type=float, default=1e-3)
    parser.add_argument("--scale-learning-rate", action="store_true",
                        help="linear scaling rule: learning rate x replicas")
    parser.add_argument("--warmup-epochs", type=float, default=0, help="linear learning-rate warm-up")
    parser.add_argument("--jit-compile", action="store_true", help="compile steps with XLA")
    parser.add_argument("--save-every-steps", type=int, default=None,
                        help="also checkpoint every N steps within an epoch")
    parser.add_argument("--steps-per-execution", type=int, default=50,
                        help="loop engine: steps per tf.function call (default 50)")


def training_options(args):
    """The ``run_training`` keyword arguments from parsed ``add_training_arguments`` options."""
    return dict(
        replicas=args.replicas,
        epochs=args.epochs,
        global_batch_size=args.global_batch_size,
        checkpoint_dir=args.checkpoint_dir,
        data=args.data,
        seed=args.seed,
        engine=args.engine,
        strategy=args.strategy,
        learning_rate=args.learning_rate,
        scale_learning_rate=args.scale_learning_rate,
        warmup_epochs=args.warmup_epochs,
        jit_compile=args.jit_compile,
        save_every_steps=args.save_every_steps,
        steps_per_execution=args.steps_per_execution,
    )


def _replica_list(text):
    try:
        values = [int(part) for part in text.split(",") if part.strip()]
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected numbers like 1,2,4. Received: {text!r}") from None
    if not values or min(values) < 1:
        raise argparse.ArgumentTypeError(f"expected replica counts >= 1 like 1,2. Received: {text!r}")
    return values


def build_parser():
    """The argparse parser for every subcommand."""
    parser = argparse.ArgumentParser(
        prog="kerasdist",
        description="Synchronous data-parallel training of an MNIST MLP with Keras and tf.distribute.",
    )
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    devices = commands.add_parser("devices", help="show physical/logical devices and what a strategy uses")
    devices.add_argument("--replicas", type=int, default=1, help="make this many replicas first")
    devices.add_argument("--json", action="store_true", help="print a JSON object as the last line")

    train = commands.add_parser("train", help="train (or resume) the MNIST MLP with N replicas")
    add_training_arguments(train)
    train.add_argument("--json", action="store_true", help="print the result record as the last line")

    compare = commands.add_parser("compare", help="1 device vs N replicas: curves, throughput, results file")
    compare.add_argument("--replicas", type=_replica_list, default=[1, 2], help="e.g. 1,2,4 (default 1,2)")
    compare.add_argument("--epochs", type=int, default=3)
    compare.add_argument("--global-batch-size", type=int, default=64,
                         help="global batch (fixed-global) or per-replica batch (fixed-per-replica)")
    compare.add_argument("--out", default="results", help="output directory (default results)")
    compare.add_argument("--data", default="auto")
    compare.add_argument("--seed", type=int, default=0)
    compare.add_argument("--engine", default="auto", choices=("auto", "fit", "loop"))
    compare.add_argument("--mode", default="fixed-global",
                         choices=("fixed-global", "fixed-per-replica", "both"),
                         help="keep the global batch fixed, or the per-replica batch (with linear LR scaling)")
    compare.add_argument("--warmup-epochs", type=float, default=1,
                         help="warm-up for fixed-per-replica (default 1)")
    compare.add_argument("--json", action="store_true", help="print the results as the last line")

    from kerasdist import cluster, doctor

    cluster.add_commands(commands, add_training_arguments)
    doctor.add_command(commands)
    return parser


def _progress_verbosity():
    # A live progress bar on a terminal, one line per epoch in logs and pipes.
    return 1 if sys.stdout.isatty() else 2


def run_devices(args):
    from kerasdist.devices import configure_replicas, describe_devices

    configure_replicas(args.replicas)
    info = describe_devices()
    for kind in ("physical", "logical"):
        print(f"{kind.capitalize()} devices:")
        for device in info[kind]:
            print(f"  {device['type']:4} {device['name']}")
    print(f"MirroredStrategy() with no device list would use: {', '.join(info['mirrored_devices'])}")
    print(f"kerasdist mirrored with --replicas {args.replicas} uses the first {args.replicas} of them.")
    return info


def run_train(args):
    from kerasdist.train import run_training

    return run_training(**training_options(args), verbose=_progress_verbosity()).to_dict()


def run_compare(args):
    from kerasdist.compare import run_comparison

    modes = ("fixed_global", "fixed_per_replica") if args.mode == "both" else (args.mode.replace("-", "_"),)
    result = run_comparison(
        replicas=args.replicas, epochs=args.epochs, global_batch_size=args.global_batch_size,
        data=args.data, seed=args.seed, out_dir=args.out, modes=modes, engine=args.engine,
        warmup_epochs=args.warmup_epochs,
    )
    for mode, differences in result.max_abs_loss_difference.items():
        shown = {level: f"{value:.3g}" for level, value in differences.items() if value is not None}
        print(f"{mode}: max |loss difference| vs 1 replica: {shown}")
    for mode, run in result.runs:
        print(f"{mode}: replicas={run.replicas} global_batch={run.global_batch_size} "
              f"test_accuracy={run.test['accuracy']:.4f} samples/s={run.samples_per_s:.0f}")
    print(f"Wrote {', '.join(result.files.values())}")
    return result.to_dict()


def main(argv=None):
    """Run the command line; return the exit status."""
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        record = args.handler(args) if hasattr(args, "handler") else COMMANDS[args.command](args)
    except KerasdistError as error:
        print(f"kerasdist: error: {error}", file=sys.stderr)
        return EXIT_USER_ERROR
    except KeyboardInterrupt:
        print("kerasdist: interrupted; rerun the same command to resume from the last checkpoint",
              file=sys.stderr)
        return 130
    if getattr(args, "json", False):
        print(json.dumps(record), flush=True)
    return 0


COMMANDS = {"devices": run_devices, "train": run_train, "compare": run_compare}
