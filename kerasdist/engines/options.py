"""The training options, defined once: their checks, command-line flags, worker argv and API keywords.

``TrainingOptions`` is the one definition of what ``run_training`` takes.
The ``train``, ``worker`` and ``launch`` commands build their options from it
(``add_arguments``), ``launch`` forwards them to its workers with ``argv``,
``run_training`` checks its keywords by building one, and a test holds the R
wrappers' arguments to it. Adding an option is one field here (and its test).
"""

import dataclasses
import inspect

from kerasdist import checks
from kerasdist.data import SOURCES
from kerasdist.engines.strategy import STRATEGIES
from kerasdist.errors import KerasdistError

ENGINES = ("auto", "fit", "loop")
BACKENDS = ("tensorflow", "jax")
# A killed worker is noticed at once (its connections reset); this bounds the wait for a hung one.
DEFAULT_COLLECTIVE_TIMEOUT_S = 120
LOOP_STEPS_PER_EXECUTION = 50
_NO_FLAG = object()


def option(default, check, doc, flag=_NO_FLAG, help=None, cli_default=_NO_FLAG, choices=None, kind=None,
           in_r=True, group="training", recorded=False):
    """A ``TrainingOptions`` field and its metadata.

    Args:
        default: the Python and R default.
        check: ``check(name, value)`` returns the value normalised or raises ``KerasdistError``.
        doc: what the option means, for ``run_training``'s docstring.
        flag: the command-line flag (``--name-with-dashes``), or leave it out for API-only options.
        help: the flag's ``--help`` text.
        cli_default: the command line's default where it differs from ``default``.
        choices: the values the command line accepts, where it lists them.
        kind: the command line's type (``int``, ``float``, ``str``; ``bool`` for a switch).
        in_r: whether ``kd_train`` (the R wrapper) takes it too.
        group: "training" (every training command has the flag) or "cluster" (``worker`` and ``launch``).
        recorded: whether the result record repeats it as given (others are recorded as resolved: the
            strategy and engine picked, the replicas made, the learning rate after scaling).
    """
    metadata = {"check": check, "doc": doc, "flag": None if flag is _NO_FLAG else flag, "help": help,
                "cli_default": default if cli_default is _NO_FLAG else cli_default, "choices": choices,
                "kind": kind or type(default), "in_r": in_r,
                "group": group, "recorded": recorded}
    return dataclasses.field(default=default, metadata=metadata)


def _count(fix):
    return lambda name, value: checks.integer(name, value, 1, fix=fix)


def _optional_count(fix):
    return lambda name, value: checks.optional_integer(name, value, fix=fix)


def _positive(fix):
    return lambda name, value: checks.number(name, value, 0.0, inclusive=False, fix=fix)


def _data(name, value):
    if not isinstance(value, (str, bytes)) and not hasattr(value, "__fspath__"):
        return value  # a MnistData: data.checked checks its arrays
    return checks.path(name, value, f"use {', '.join(SOURCES)} or the path of an .npz file")


def _strategy(name, value):
    if value is None:
        return None
    if not isinstance(value, str) or not value.strip():
        checks.fail(name, "a strategy name", name, value,
                    f"use {', '.join(STRATEGIES[:-1])} or {STRATEGIES[-1]}")
    return value


def _verbose(name, value):
    if checks.whole(value) not in (0, 1, 2):
        checks.fail(name, "0, 1 or 2", name, value,
                    "use 0 (silent), 1 (progress bar) or 2 (a line per epoch)")
    return int(value)


def _callbacks(name, value):
    rule = "a list of Keras callbacks"
    if isinstance(value, (str, bytes)) or not hasattr(value, "__iter__"):
        checks.fail(name, rule, name, value, "pass e.g. [keras.callbacks.CSVLogger(path)]")
    callbacks = tuple(value)
    for callback in callbacks:
        if not callable(getattr(callback, "on_train_batch_end", None)):
            checks.fail(name, rule, name, callback, "pass keras.callbacks.Callback objects")
    return callbacks


def _optional_positive(fix):
    return lambda name, value: None if value is None else _positive(fix)(name, value)


@dataclasses.dataclass(frozen=True)
class TrainingOptions:
    """The options of one ``run_training`` call, checked and normalised (whole numbers as int).

    Raises:
        KerasdistError: for the first invalid option, naming it, the rule and what to do.

    Example:
        >>> TrainingOptions(replicas=2, epochs=3.0).epochs
        3
        >>> TrainingOptions(replicas=2, global_batch_size=63)  # doctest: +ELLIPSIS
        Traceback (most recent call last):
        ...
        kerasdist.errors.KerasdistError: global_batch_size must be divisible by replicas=2 ... try 62
    """

    replicas: int = option(
        1, _count("use 1 for one device, or the replicas you want"),
        "replicas on this machine (see ``configure_replicas``).",
        "--replicas", "replicas on this machine (default 1)")
    epochs: int = option(
        3, _count("epochs is the total to reach, e.g. 3"),
        'the total number of epochs to reach (not "epochs to add").',
        "--epochs", "total epochs to reach; a rerun resumes rather than adds (default 3)", recorded=True)
    global_batch_size: int = option(
        64, _count("try 64"),
        "samples per step across all replicas; must be a multiple of ``replicas``.",
        "--global-batch-size", "samples per step across all replicas (default 64)", recorded=True)
    checkpoint_dir: str = option(
        None, lambda name, value: None if value is None else checks.path(
            name, value, "name a folder, or leave it out for no checkpoints"),
        "where checkpoints and the metrics log go; None: no checkpoints.",
        "--checkpoint-dir", "checkpoints + metrics log; rerun to resume", kind=str)
    data: str = option(
        "auto", _data,
        f"{', '.join(map(repr, SOURCES))}, an .npz path, or a ``MnistData``.",
        "--data", f"{' | '.join(SOURCES)} | PATH.npz (default auto)")
    seed: int = option(
        0, lambda name, value: checks.random_seed(value, name),
        "seeds weights, validation split and data order.", "--seed", "seeds weights, split and data order",
        recorded=True)
    backend: str = option(
        "tensorflow", lambda name, value: checks.choice(name, value, BACKENDS),
        '"tensorflow" (tf.distribute, both engines) or "jax" (``keras.distribution.DataParallel`` and '
        "``fit()``; see ``kerasdist.engines.jax_engine``). Keras takes its backend when it loads: "
        "choose before anything in the process imports Keras.",
        "--backend", "Keras backend: tensorflow (tf.distribute) or jax (keras.distribution) "
        "(default tensorflow)",
        choices=BACKENDS, recorded=True)
    engine: str = option(
        "fit", lambda name, value: checks.choice(name, value, ENGINES),
        '"fit" (Keras ``model.fit``), "loop" (kerasdist\'s own loop, required for multi_worker), or '
        '"auto": the engine ``kerasdist doctor`` found for the strategy (see ``engines.engine_for``).',
        "--engine", "Keras fit() or kerasdist's own loop; auto: what kerasdist doctor found for the strategy "
        "(default auto)", cli_default="auto", choices=ENGINES)
    strategy: str = option(
        None, _strategy, 'strategy name; default "mirrored" for replicas > 1, else "default".',
        "--strategy", f"{' | '.join(STRATEGIES)} (default: mirrored if replicas > 1)", kind=str)
    learning_rate: float = option(
        1e-3, _positive("try 0.001"), "Adam's learning rate for one replica.", "--learning-rate")
    scale_learning_rate: bool = option(
        False, checks.flag, "multiply the learning rate by ``replicas`` (linear scaling rule).",
        "--scale-learning-rate", "linear scaling rule: learning rate x replicas")
    warmup_epochs: float = option(
        0, lambda name, value: checks.number(name, value, 0.0, fix="use 0 for no warm-up, or e.g. 1"),
        "epochs of linear learning-rate warm-up from the one-replica rate to the scaled one "
        "(with ``scale_learning_rate``; without it the rate stays flat).", "--warmup-epochs",
        "linear warm-up from the one-replica rate to the scaled one (with --scale-learning-rate)",
        kind=float)
    jit_compile: bool = option(
        False, checks.flag, "compile steps with XLA.", "--jit-compile", "compile steps with XLA")
    save_every_steps: int = option(
        None, _optional_count("leave it out to save at epoch ends only"),
        "also checkpoint every N steps within an epoch.",
        "--save-every-steps", "also checkpoint every N steps within an epoch", kind=int)
    log_every_steps: int = option(
        None, _optional_count("leave it out for about 100 records per epoch"),
        "log step metrics every N steps (default: ~100 records per epoch).", kind=int)
    steps_per_execution: int = option(
        None, _optional_count("use 1 for one step per call, or e.g. 50"),
        "steps per compiled call: the loop engine's ``tf.function`` (default "
        f"{LOOP_STEPS_PER_EXECUTION}) or the JAX engine's calls (default 1, so that every step's own loss "
        "is logged); a checkpoint or a stop lands at the end of a call.",
        "--steps-per-execution", f"steps per compiled call: loop engine (default {LOOP_STEPS_PER_EXECUTION}) "
        "and JAX engine (default 1)", kind=int)
    deterministic: bool = option(
        True, checks.flag, "seed everything and turn on TensorFlow's deterministic ops.")
    collective_timeout_s: float = option(
        None, _optional_positive("try 60"),
        "multi_worker only: how long an all-reduce may wait for a missing worker before failing "
        "(None: forever).", "--collective-timeout-s", "fail an all-reduce that waits longer than this for a "
        f"peer (default {DEFAULT_COLLECTIVE_TIMEOUT_S})", cli_default=DEFAULT_COLLECTIVE_TIMEOUT_S,
        kind=float, in_r=False, group="cluster")
    verbose: int = option(1, _verbose, "0 silent, 1 progress bar, 2 one line per epoch.")
    callbacks: tuple = option(
        (), _callbacks, "more Keras callbacks, driven by either engine after kerasdist's own.", in_r=False)

    def __post_init__(self):
        for field in dataclasses.fields(self):
            value = field.metadata["check"](field.name, getattr(self, field.name))
            object.__setattr__(self, field.name, value)
        if self.global_batch_size % self.replicas:
            batch, replicas = self.global_batch_size, self.replicas
            checks.fail("global_batch_size", f"divisible by replicas={replicas} so each replica gets an "
                        "equal share", "global_batch_size", batch,
                        f"try {batch - batch % replicas or replicas}")
        _check_strategy_combination(self)

    def keywords(self):
        """The options as ``run_training`` keyword arguments (a shallow dict: data arrays are not copied)."""
        return {field.name: getattr(self, field.name) for field in dataclasses.fields(self)}

    def recorded(self):
        """The options the result record repeats as given: ``{name: value}``."""
        return {field.name: getattr(self, field.name) for field in dataclasses.fields(self)
                if field.metadata["recorded"]}

    def argv(self):
        """The options as command-line options (to forward them to ``kerasdist worker``).

        Example:
            >>> TrainingOptions(epochs=2, jit_compile=True).argv()[:4]
            ['--replicas', '1', '--epochs', '2']
        """
        arguments = []
        for field in _flagged():
            value = getattr(self, field.name)
            if field.metadata["kind"] is bool:
                arguments += [field.metadata["flag"]] if value else []
            elif value is not None:
                arguments += [field.metadata["flag"], str(value)]
        return arguments

    @classmethod
    def add_arguments(cls, parser, names=None, changes=None):
        """Add options' flags to an ``argparse`` parser (the command-line contract).

        Args:
            parser: the (sub)command's parser.
            names: the options to add, in this order; None: every option of group "training".
            changes: option name -> ``add_argument`` keywords that differ for this command (help, default).
        """
        fields = {field.name: field for field in _flagged()}
        if names is None:
            names = [name for name, field in fields.items() if field.metadata["group"] == "training"]
        for name in names:
            meta = fields[name].metadata
            if meta["kind"] is bool:
                keywords = {"action": "store_true", "help": meta["help"]}
            else:
                keywords = {"default": meta["cli_default"], "help": meta["help"]}
                keywords.update({"type": meta["kind"]} if meta["kind"] is not str else {})
                keywords.update({"choices": meta["choices"]} if meta["choices"] else {})
            parser.add_argument(meta["flag"], **{**keywords, **(changes or {}).get(name, {})})

    @classmethod
    def from_args(cls, args, **overrides):
        """Checked options from parsed ``add_arguments`` options (plus keywords the command sets)."""
        given = {field.name: getattr(args, field.name) for field in _flagged() if hasattr(args, field.name)}
        return cls(**{**given, **overrides})

    @classmethod
    def signature(cls):
        """``run_training``'s signature: every option as a keyword with its default."""
        return inspect.Signature([
            inspect.Parameter(field.name, inspect.Parameter.KEYWORD_ONLY, default=field.default)
            for field in dataclasses.fields(cls)])

    @classmethod
    def docs(cls, indent="        "):
        """The ``Args:`` lines of ``run_training``'s docstring."""
        fields = dataclasses.fields(cls)
        return "\n".join(f"{indent}{field.name}: {field.metadata['doc']}" for field in fields)


def _flagged():
    return [field for field in dataclasses.fields(TrainingOptions) if field.metadata["flag"]]


def _check_strategy_combination(options):
    strategy, engine, replicas = options.strategy, options.engine, options.replicas
    if options.backend == "jax":
        if engine == "loop":
            checks.fail("engine", "fit or auto with backend jax (kerasdist's loop runs on TensorFlow)",
                        "engine", engine, "use --engine auto, or --backend tensorflow for the loop")
        if strategy not in (None, "multi_worker"):
            checks.fail("strategy", "left out with backend jax (it trains with keras.distribution's "
                        "DataParallel)", "strategy", strategy,
                        "leave --strategy out, or use --backend tensorflow")
        return
    if strategy == "multi_worker" and engine == "fit":
        checks.fail("engine", "loop under strategy multi_worker (Keras 3 fit() fails there, "
                    "keras-team/keras#20585)", "engine", engine, "use --engine loop")
    if strategy in ("default", "one_device", "multi_worker") and replicas != 1:
        checks.fail("replicas", f"1: strategy {strategy} runs 1 replica per process", "replicas", replicas,
                    "use strategy mirrored for several replicas")
    if strategy == "central_storage" and engine == "loop" and options.jit_compile:
        checks.fail("jit_compile", "False under strategy central_storage with the loop engine (XLA cannot "
                    "read variables kept on another device)", "jit_compile", True,
                    "use strategy mirrored for XLA")


def check_worker_options(replicas, global_batch_size, num_workers):
    """Raise ``KerasdistError`` for training options that multi-worker training cannot take.

    Example:
        >>> check_worker_options(replicas=1, global_batch_size=64, num_workers=2)
    """
    if replicas != 1:
        raise KerasdistError(
            "replicas does not apply to workers: each worker trains one replica on its CPU (or one per "
            f"GPU). Received: replicas={replicas}"
        )
    if global_batch_size % num_workers:
        raise KerasdistError(
            f"global_batch_size must be divisible by the {num_workers} workers. "
            f"Received: global_batch_size={global_batch_size}"
        )
