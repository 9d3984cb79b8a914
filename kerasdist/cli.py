"""The command line: ``kerasdist devices | train | compare | worker | launch | slurm-script | doctor |
course``.

Every subcommand is defined here; the modules it calls never import the CLI.
"""

import argparse
import importlib.util
import json
import os
import sys
import warnings

from kerasdist import checks, cluster, data
from kerasdist.cluster import peers, slurm
from kerasdist.engines import interrupt
from kerasdist.engines.options import TrainingOptions
from kerasdist.errors import ClusterError, KerasdistError, StateWriteError, TrainingDivergedError
from kerasdist.startup import import_tensorflow_quietly
from kerasdist.state import files

EXIT_USER_ERROR = 2
EXIT_WORKER_FAILED = 1
EXIT_DIVERGED = 3
EXIT_WRITE_FAILED = 4
EXIT_STOPPED_BY_SIGNAL = {130: "SIGINT", 143: "SIGTERM"}  # 128 + the signal's number, as shells report it


class OneLineParser(argparse.ArgumentParser):
    """An ``ArgumentParser`` whose usage errors are one line (no usage block), like every other error."""

    def error(self, message):
        self.exit(EXIT_USER_ERROR, f"kerasdist: error: {message}; see {self.prog} --help\n")


def _replica_list(text):
    try:
        values = [int(part) for part in text.split(",") if part.strip()]
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected numbers like 1,2,4. Received: {text!r}") from None
    if not values or min(values) < 1:
        raise argparse.ArgumentTypeError(f"expected replica counts >= 1 like 1,2. Received: {text!r}")
    return values


def _seconds(text):
    try:
        value = float(text)
    except ValueError:
        value = None
    if value is None or not 0 < value < float("inf"):
        raise argparse.ArgumentTypeError(f"expected a number of seconds > 0. Received: {text!r}")
    return value


def build_parser():
    """The argparse parser for every subcommand."""
    parser = OneLineParser(
        prog="kerasdist",
        description="Synchronous data-parallel training of an MNIST MLP with Keras and tf.distribute.",
    )
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    add = TrainingOptions.add_arguments  # every training option's flag comes from its one definition

    devices = commands.add_parser("devices", help="show physical/logical devices and what a strategy uses")
    add(devices, ["replicas"], {"replicas": {"help": "make this many replicas first"}})
    devices.add_argument("--json", action="store_true", help="print a JSON object as the last line")

    train = commands.add_parser("train", help="train (or resume) the MNIST MLP with N replicas")
    add(train)
    train.add_argument("--json", action="store_true", help="print the result record as the last line")

    _add_compare(commands.add_parser(
        "compare", help="1 device vs N replicas: curves, throughput, results file"))
    _add_worker(commands.add_parser(
        "worker", help="run one task (chief, worker or evaluator) of a TF_CONFIG cluster or a Slurm step",
        description="Run the task TF_CONFIG names, or one task of `srun kerasdist worker` (every Slurm task "
                    "is a worker). Workers train with MultiWorkerMirroredStrategy and kerasdist's loop; the "
                    "chief (worker 0 when there is no chief) writes checkpoints and the metrics log to "
                    "--checkpoint-dir; the evaluator evaluates each new checkpoint there.",
    ))
    _add_launch(commands.add_parser(
        "launch", help="run N local workers (and an evaluator) on 127.0.0.1",
        description="Start N workers on free loopback ports, stream their output with a [worker i] prefix, "
                    "and exit with the worst worker's status. Rerun the same command to resume.",
    ))
    _add_slurm_script(commands.add_parser(
        "slurm-script", help="print a commented sbatch script that runs `srun kerasdist worker`",
        description="Print an sbatch script to edit and submit: one kerasdist worker per Slurm task, "
                    "checkpoints on a shared filesystem, and how to resume.",
    ))

    doctor = commands.add_parser("doctor", help="what this machine has, what each lesson needs, which engine")
    doctor.add_argument("--no-probes", action="store_true",
                        help="skip the probes of upstream bugs (use cached answers)")
    doctor.add_argument("--probe-timeout-s", type=float, default=60,
                        help="kill a probe after this many seconds (default 60)")
    doctor.add_argument("--json", action="store_true", help="print the report as one JSON object last")

    sync_cost = commands.add_parser(
        "sync-cost", help="time all-reduces on this machine and fit each transport's latency and bandwidth",
        description="Time sum all-reduces of 1 KiB to 64 MiB over N virtual CPU devices (a plain "
                    "MirroredStrategy's collective ring, ReductionToOneDevice), N worker processes over "
                    "loopback and N JAX CPU devices, each in processes of its own, and fit the alpha-beta "
                    "model of a ring all-reduce: latency alpha, bandwidth 1/beta.")
    sync_cost.add_argument("--replicas", type=_replica_list, default=[2, 4], help="e.g. 2,4 (default 2,4)")
    sync_cost.add_argument("--repeats", type=int, default=5, help="timed all-reduces per size (default 5)")
    sync_cost.add_argument("--timeout-s", type=_seconds, default=300,
                           help="give up on a transport after this many seconds (default 300)")
    sync_cost.add_argument("--json", action="store_true", help="print the timings and fits as the last line")

    course = commands.add_parser("course", help="for instructors: a student edition, grading (nbgrader)")
    editions = course.add_subparsers(dest="course_command", required=True, metavar="ACTION")
    student = editions.add_parser("student", help="write the lessons without solutions, to hand out")
    student.add_argument("out", help="a new or empty folder outside the course's source tree")
    student.add_argument("--lesson", action="append", default=[], metavar="NN",
                         help="only this lesson, e.g. 01 (repeatable; default: all)")
    grade = editions.add_parser("grade", help="grade submitted notebooks into one CSV")
    grade.add_argument("submissions", help="a folder of <student>/<lesson notebook>.ipynb")
    grade.add_argument("--csv", default="grades.csv", help="where to write the grades (default grades.csv)")
    grade.add_argument("--timeout-s", type=_seconds, default=600,
                       help="a student's lesson that runs longer fails all its questions (default 600)")
    grade.add_argument("--whole", action="store_true",
                       help="execute every student's whole lesson (nbgrader) instead of checking each answer "
                            "cell in its exercise's context")
    grade.add_argument("--cell-timeout-s", type=_seconds, default=None,
                       help="a cell that runs longer is stopped and the lesson goes on: only its question "
                            "fails (default: a third of --timeout-s, at most 120)")
    grade.add_argument("--answer-timeout-s", type=_seconds, default=None,
                       help="the same for a student's answer cell, where a lesson is executed (--whole, "
                            "or an exercise that needs its lesson): at most --cell-timeout-s, its default")
    return parser


def _add_compare(compare):
    add = TrainingOptions.add_arguments
    compare.add_argument("--replicas", type=_replica_list, default=[1, 2], help="e.g. 1,2,4 (default 1,2)")
    add(compare, ["epochs", "global_batch_size"], {"epochs": {"help": None}, "global_batch_size": {
        "help": "global batch (fixed-global) or per-replica batch (fixed-per-replica)"}})
    compare.add_argument("--out", default="results", help="output directory (default results)")
    add(compare, ["data", "seed", "engine", "backend"],
        {name: {"help": None} for name in ("data", "seed", "engine", "backend")})
    compare.add_argument("--mode", default="fixed-global",
                         choices=("fixed-global", "fixed-per-replica", "both"),
                         help="keep the global batch fixed, or the per-replica batch "
                              "(with linear LR scaling)")
    add(compare, ["warmup_epochs"], {"warmup_epochs": {"default": 1,
                                                       "help": "warm-up for fixed-per-replica (default 1)"}})
    compare.add_argument("--json", action="store_true", help="print the results as the last line")


def _add_worker(worker):
    TrainingOptions.add_arguments(worker)
    _add_cluster_arguments(worker)
    worker.add_argument("--cluster", default="auto", choices=("auto", "slurm", "tf_config"),
                        help="where the cluster comes from: the Slurm job step (srun) or TF_CONFIG "
                             "(default auto: slurm when SLURM_PROCID is set, else tf_config)")
    worker.add_argument("--slurm-port-base", type=int, default=None,
                        help="first worker port on each Slurm node (default: derived from SLURM_JOB_ID)")
    worker.add_argument("--record-file", default=None, help="also write the result record to this JSON file")
    worker.add_argument("--json", action="store_true", help="print the result record as the last line")
    worker.set_defaults(engine="loop")


def _add_launch(launch):
    launch.add_argument("--workers", type=int, default=2, help="number of workers (default 2)")
    launch.add_argument("--evaluator", action="store_true",
                        help="also run an evaluator (needs --checkpoint-dir)")
    launch.add_argument("--ports", default=None,
                        help="comma-separated ports, one per task (default: free ones)")
    TrainingOptions.add_arguments(launch)
    _add_cluster_arguments(launch)
    launch.add_argument("--json", action="store_true",
                        help="print the chief's result record as the last line")
    launch.set_defaults(engine="loop")


def _add_slurm_script(script):
    script.add_argument("--nodes", type=int, default=1, help="nodes (default 1)")
    script.add_argument("--tasks-per-node", type=int, default=2, help="workers per node (default 2)")
    script.add_argument("--gpus-per-task", type=int, default=0,
                        help="GPUs per worker; 0 for CPU nodes (default 0)")
    script.add_argument("--cpus-per-task", type=int, default=1, help="CPU cores per worker (default 1)")
    script.add_argument("--time", default="00:30:00", help="time limit (default 00:30:00)")
    script.add_argument("--job-name", default="kerasdist", help="job name (default kerasdist)")
    script.add_argument("--partition", default=None, help="partition (default: a commented placeholder)")
    TrainingOptions.add_arguments(
        script, ["epochs", "global_batch_size", "data", "seed", "checkpoint_dir"],
        {"epochs": {"help": "total epochs to reach (default 3)"},
         "global_batch_size": {"help": "(default 64)"}, "seed": {"help": None}, "checkpoint_dir": {
             "default": "checkpoints",
             "help": "on a filesystem every node sees (default checkpoints, beside the script)"}})
    TrainingOptions.add_arguments(script, ["backend", "save_every_steps"])
    script.add_argument("--requeue", action="store_true",
                        help="let Slurm requeue the job after a preemption or node failure; it resumes")
    script.add_argument("--kerasdist", default="kerasdist",
                        help="how the nodes run kerasdist (default kerasdist; e.g. ~/venv/bin/kerasdist)")


def _add_cluster_arguments(parser):
    TrainingOptions.add_arguments(parser, ["collective_timeout_s"])
    parser.add_argument("--peer-timeout-s", type=_seconds, default=peers.DEFAULT_PEER_TIMEOUT_S,
                        help="end a worker with one line naming its peers when they do not resolve, join or "
                             f"answer for this long (default {peers.DEFAULT_PEER_TIMEOUT_S})")
    parser.add_argument("--evaluator-idle-timeout-s", type=float, default=600,
                        help="the evaluator gives up after this long without a new checkpoint (default 600)")


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
    from kerasdist.engines.backends import run_training

    with interrupt.stop_on_signals():
        options = TrainingOptions.from_args(args, verbose=_progress_verbosity())
        return run_training(**options.keywords()).to_dict()


def run_compare(args):
    from kerasdist.experiments.compare import run_comparison

    modes = ("fixed_global", "fixed_per_replica") if args.mode == "both" else (args.mode.replace("-", "_"),)
    result = run_comparison(
        replicas=args.replicas, epochs=args.epochs, global_batch_size=args.global_batch_size,
        data=args.data, seed=args.seed, out_dir=args.out, modes=modes, engine=args.engine,
        warmup_epochs=args.warmup_epochs, backend=args.backend,
    )
    for mode, differences in result.max_abs_loss_difference.items():
        shown = {level: f"{value:.3g}" for level, value in differences.items() if value is not None}
        print(f"{mode}: max |loss difference| vs 1 replica: {shown}")
    for mode, run in result.runs:
        print(f"{mode}: replicas={run.replicas} global_batch={run.global_batch_size} "
              f"test_accuracy={run.test['accuracy']:.4f} samples/s={run.samples_per_s:.0f}")
    print(f"Wrote {', '.join(result.files.values())}")
    return result.to_dict()


def check_options(args):
    """The checks of a command's options that need no TensorFlow (the command repeats them)."""
    if args.command == "train":
        TrainingOptions.from_args(args)
    if args.command in ("worker", "launch"):
        check_cluster_options(args)
    if args.command == "launch":
        launch_ports(args)
    if args.command == "worker" and not uses_slurm(args):
        cluster.parse_tf_config(os.environ.get("TF_CONFIG"))
    if args.command in ("train", "compare", "worker", "launch") and args.data not in data.SOURCES:
        data.load_mnist(args.data, args.seed, verbose=False)  # a data file: check its arrays now
    if args.command == "devices":
        checks.integer("replicas", args.replicas, 1, fix="use 1 for one device, or the replicas you want")
    if args.command == "compare":
        TrainingOptions(epochs=args.epochs, global_batch_size=args.global_batch_size, seed=args.seed,
                        engine=args.engine, warmup_epochs=args.warmup_epochs, backend=args.backend)


def launch_ports(args):
    """The checked ``--ports`` of ``launch`` as ints (None: pick free ones); checks ``--workers`` too."""
    workers = checks.workers(args.workers)
    if args.ports is None:
        return None
    try:
        ports = [int(part) for part in args.ports.split(",")]
    except ValueError:
        checks.fail("ports", "comma-separated numbers", "ports", args.ports,
                        "pick free ports such as 23456,23457, or leave --ports out")
    return checks.ports(ports, workers + (1 if args.evaluator else 0))


def check_cluster_options(args):
    """Check the training and timeout options of ``worker`` and ``launch`` before any process starts."""
    TrainingOptions.from_args(args)
    checks.number("evaluator_idle_timeout_s", args.evaluator_idle_timeout_s, 0.0, inclusive=False,
                      fix="try 600")


def uses_slurm(args):
    """Whether ``worker`` takes its cluster from the Slurm job step rather than TF_CONFIG."""
    return args.cluster == "slurm" or (args.cluster == "auto" and slurm.in_slurm_step())


def run_worker(args):
    from kerasdist.cluster import launcher  # no Keras: the backend is still to be chosen

    if os.environ.get(launcher.ORPHAN_GRACE_VARIABLE):  # started by `kerasdist launch`: end with it
        interrupt.stop_when_parent_dies(sys.stdin.fileno(), float(os.environ[launcher.ORPHAN_GRACE_VARIABLE]))
    if args.backend == "jax":
        return _run_jax_worker(args)

    from kerasdist.cluster import roles

    if uses_slurm(args):
        task = slurm.slurm_task(args.slurm_port_base)
        print(f"Slurm task {os.environ['SLURM_PROCID']}: {task.name}{' (chief)' if task.is_chief else ''} at "
              f"{task.address}; workers {', '.join(task.cluster['worker'])}", flush=True)
    else:
        task = cluster.parse_tf_config(os.environ.get("TF_CONFIG"))
    if args.strategy not in (None, "multi_worker"):
        raise KerasdistError(
            f"workers train with strategy multi_worker. Received: --strategy {args.strategy}"
        )
    try:
        if task.task_type == "evaluator":
            record = roles.run_evaluator(args.checkpoint_dir, args.epochs, args.data, args.seed,
                                         args.global_batch_size, idle_timeout_s=args.evaluator_idle_timeout_s)
        else:
            with interrupt.stop_on_signals():
                options = TrainingOptions.from_args(args).keywords()
                record = roles.run_worker(task, options, args.collective_timeout_s,
                                          verbose=_progress_verbosity(), peer_timeout_s=args.peer_timeout_s)
    except ClusterError as error:
        print(f"kerasdist: error: {error}", file=sys.stderr, flush=True)
        raise SystemExit(EXIT_WORKER_FAILED) from None
    if args.record_file:
        files.atomic_write_text(args.record_file, json.dumps(record))
    return record


def _run_jax_worker(args):
    from kerasdist.engines import jax_engine

    if uses_slurm(args):
        process = jax_engine.Process(*slurm.slurm_process(args.slurm_port_base))
        print(f"Slurm task {process.index} of {process.count}: coordinator {process.coordinator}", flush=True)
    else:
        process = jax_engine.process_of(cluster.parse_tf_config(os.environ.get("TF_CONFIG")))
    with interrupt.stop_on_signals():
        options = TrainingOptions.from_args(args, verbose=_progress_verbosity(), strategy=None)
        record = jax_engine.run_worker(process, options)
    if args.record_file:
        files.atomic_write_text(args.record_file, json.dumps(record))
    return record


def run_launch(args):
    from kerasdist.cluster import launcher
    from kerasdist.state import locking

    ports = launch_ports(args)
    cluster.check_worker_options(args.replicas, args.global_batch_size, args.workers)
    if args.evaluator and args.backend == "jax":
        raise KerasdistError("--evaluator reads TensorFlow checkpoints; with --backend jax every worker "
                             "validates at each epoch's end: leave --evaluator out")
    if args.evaluator and args.checkpoint_dir is None:
        raise KerasdistError(
            "--evaluator needs --checkpoint-dir: it evaluates the checkpoints the chief writes there"
        )
    if args.checkpoint_dir is not None:
        # Fail now, not once the workers run (then the chief holds the lock).
        locking.check_free(args.checkpoint_dir)
    worker_arguments = TrainingOptions.from_args(args).argv() + [
        "--cluster", "tf_config",
        "--peer-timeout-s", str(args.peer_timeout_s),
        "--evaluator-idle-timeout-s", str(args.evaluator_idle_timeout_s),
    ]
    status, records = launcher.launch(args.workers, worker_arguments, args.evaluator, ports,
                                      failure_grace_s=args.peer_timeout_s + 30)
    if status in EXIT_STOPPED_BY_SIGNAL:
        saved = ("the workers saved a checkpoint at the same step; rerun the same command to resume"
                 if args.checkpoint_dir else "nothing saved (no --checkpoint-dir)")
        print(f"kerasdist: launch stopped by {EXIT_STOPPED_BY_SIGNAL[status]}: {saved}", file=sys.stderr,
              flush=True)
        raise SystemExit(status)
    if status:
        print(f"kerasdist: error: a worker failed (worst exit status {status}); rerun the same command "
              "to resume from the last checkpoint", file=sys.stderr, flush=True)
        raise SystemExit(status)
    workers = [{"task": name, "weights_sha256": record["weights_sha256"]}
               for name, record in records.items() if name.startswith("worker")]
    digests = {worker["weights_sha256"] for worker in workers}
    if len(digests) != 1:
        print(f"kerasdist: error: the workers ended with different weights: {workers}",
              file=sys.stderr, flush=True)
        raise SystemExit(EXIT_WORKER_FAILED)
    print(f"[launch] {len(workers)} worker(s) finished with identical weights (sha256 {digests.pop()})",
          flush=True)
    record = dict(records["worker 0"], workers=workers)
    if args.evaluator:
        record["evaluator"] = records["evaluator 0"]
    return record


def run_slurm_script(args):
    print(slurm.sbatch_script(
        nodes=args.nodes, tasks_per_node=args.tasks_per_node, gpus_per_task=args.gpus_per_task,
        cpus_per_task=args.cpus_per_task, time_limit=args.time, job_name=args.job_name,
        partition=args.partition, epochs=args.epochs, global_batch_size=args.global_batch_size,
        data=args.data, seed=args.seed, checkpoint_dir=args.checkpoint_dir, kerasdist=args.kerasdist,
        backend=args.backend, requeue=args.requeue, save_every_steps=args.save_every_steps,
    ), end="")


def run_doctor(args):
    from kerasdist import doctor

    if not args.probe_timeout_s > 0:
        raise KerasdistError(f"--probe-timeout-s must be > 0. Received: {args.probe_timeout_s:g}; try 60")
    report = doctor.diagnose(run_probes=not args.no_probes, probe_timeout_s=args.probe_timeout_s)
    print(doctor.format_report(report), flush=True)
    return report


def _show_warning(message, category, filename, lineno, file=None, line=None, _show=warnings.showwarning):
    """Print kerasdist's recovery notes as one ``kerasdist:`` line; other warnings as Python does."""
    if issubclass(category, files.RecoveryWarning):
        print(f"kerasdist: {message}", file=sys.stderr, flush=True)
    else:
        _show(message, category, filename, lineno, file, line)


def run_sync_cost(args):
    from kerasdist.measure import sync_cost

    if min(args.replicas) < 2 or args.repeats < 1:
        raise KerasdistError("--replicas must be 2 or more each and --repeats 1 or more. Received: "
                             f"--replicas {','.join(map(str, args.replicas))} --repeats {args.repeats}")
    print("all-reduce of 1 KiB to 64 MiB (virtual devices and loopback share this machine's cores and "
          "memory)", flush=True)
    transports = list(sync_cost.TRANSPORTS)
    if importlib.util.find_spec("jax") is None:
        transports.remove("JAX CPU collectives")
        print("JAX CPU collectives: skipped, JAX is not installed (pip install 'kerasdist[jax]')", flush=True)
    return {"transports": sync_cost.measure_transports(args.replicas, repeats=args.repeats,
                                                       timeout_s=args.timeout_s, transports=transports,
                                                       report=lambda line: print(line, flush=True))}


def run_course(args):
    from kerasdist.course import instructor as course

    if args.course_command == "student":
        lessons = [course.lesson_assignment(number) for number in args.lesson]
        written = course.student_edition(args.out, lessons=lessons)
        print(f"{len(written)} notebooks in {args.out}: no solutions, no hidden tests; the checks answer "
              "the students' own code", flush=True)
        return {"notebooks": [str(path) for path in written]}
    rows = course.grade(args.submissions, args.csv, timeout_s=args.timeout_s,
                        cell_timeout_s=args.cell_timeout_s, whole=args.whole,
                        answer_timeout_s=args.answer_timeout_s)
    print(f"{len(rows)} students graded: {args.csv}", flush=True)
    return {"csv": args.csv, "students": len(rows)}


def main(argv=None):
    """Run the command line; return the exit status."""
    parser = build_parser()
    args = parser.parse_args(argv)
    if args.command in ("worker", "launch") and args.backend == "jax" and args.engine == "loop":
        if not any(arg.startswith("--engine") for arg in (sys.argv[1:] if argv is None else argv)):
            args.engine = "auto"  # workers default to the loop on TensorFlow; JAX workers train with fit()
    warnings.showwarning = _show_warning
    try:
        check_options(args)
        if args.command not in WITHOUT_TENSORFLOW and getattr(args, "backend", "tensorflow") == "tensorflow":
            import_tensorflow_quietly()  # after the checks: a mistake is reported without waiting for it
        record = COMMANDS[args.command](args)
    except KerasdistError as error:
        print(f"kerasdist: error: {' '.join(str(error).split())}", file=sys.stderr)
        if isinstance(error, TrainingDivergedError):
            return EXIT_DIVERGED
        return EXIT_WRITE_FAILED if isinstance(error, StateWriteError) else EXIT_USER_ERROR
    except interrupt.TrainingInterrupted as stop:
        print(f"kerasdist: {stop}", file=sys.stderr, flush=True)
        return stop.exit_status
    except KeyboardInterrupt:
        print("kerasdist: interrupted; rerun the same command to resume from the last checkpoint",
              file=sys.stderr)
        return 130
    if getattr(args, "json", False):
        print(json.dumps(record), flush=True)
    return 0


# launch only starts workers, slurm-script only prints, course and sync-cost run in other processes: none
# loads TensorFlow (seconds, noise); every other command loads it quietly.
WITHOUT_TENSORFLOW = {"launch", "slurm-script", "course", "sync-cost"}
COMMANDS = {
    "devices": run_devices, "train": run_train, "compare": run_compare,
    "worker": run_worker, "launch": run_launch, "slurm-script": run_slurm_script, "doctor": run_doctor,
    "course": run_course, "sync-cost": run_sync_cost,
}
