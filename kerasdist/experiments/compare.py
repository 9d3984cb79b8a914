"""The convergence experiment: one device vs N replicas, same seed, same data order."""

import dataclasses

from tqdm import tqdm  # not tqdm.auto: without ipywidgets it warns (with a file path) in every notebook

from kerasdist import checks
from kerasdist import data as data_module
from kerasdist.devices import configure_replicas, on_virtual_cpus
from kerasdist.engines.backends import run_training
from kerasdist.engines.options import TrainingOptions
from kerasdist.experiments.comparison_files import check_creatable_directory, write_comparison
from kerasdist.result import steady_samples_per_s
from kerasdist.startup import use_backend
from kerasdist.state import locking

MODES = ("fixed_global", "fixed_per_replica")


@dataclasses.dataclass
class ComparisonResult:
    """Runs of a comparison and what they show.

    Attributes:
        runs: a list of ``(mode, TrainingResult)``.
        max_abs_loss_difference: per mode, the largest |train loss difference|
            between each N-replica run and the 1-replica run, over logged steps
            (``"step"``: each step's own batch loss, fixed_global only) and over
            epochs (``"epoch"``: the epoch means).
        files: paths of the written results (``json``, ``csv``, ``figure``).
        virtual_cpus: whether the replicas were devices sharing one CPU's cores (asked of the backend
            once, when the comparison made its devices).
    """

    runs: list
    max_abs_loss_difference: dict
    files: dict
    virtual_cpus: bool = False

    def to_dict(self):
        """Plain JSON-able record: summary plus each run's result record (with its steady-state samples/s)."""
        return {
            "max_abs_loss_difference": self.max_abs_loss_difference,
            "files": self.files,
            "virtual_cpus": self.virtual_cpus,
            "runs": [{"mode": mode, **result.to_dict(), "steady_samples_per_s": steady_samples_per_s(result)}
                     for mode, result in self.runs],
        }

    def tidy(self):
        """One row per (run, level, index, metric): the long format R and pandas like.

        ``level`` is "step" (index: global step) or "epoch" (index: 1-based epoch).
        """
        rows = []
        for mode, result in self.runs:
            run = f"{mode}/{result.replicas}"
            base = {"run": run, "mode": mode, "replicas": result.replicas,
                    "global_batch_size": result.global_batch_size}
            for level, table, index_name in (("step", result.steps, "global_step"),
                                             ("epoch", result.history, "epoch")):
                for metric, values in table.items():
                    if metric in ("epoch", "step", "global_step"):
                        continue
                    for position, value in enumerate(values):
                        index = table[index_name][position] + (1 if level == "epoch" else 0)
                        rows.append({**base, "level": level, "index": index, "metric": metric,
                                     "value": value})
        return rows


def run_comparison(replicas=(1, 2), epochs=3, global_batch_size=64, data="auto", seed=0, out_dir=None,
                   modes=("fixed_global",), learning_rate=1e-3, warmup_epochs=1, engine="fit", verbose=1,
                   backend="tensorflow"):
    """Train the same model with 1 and N replicas and compare their curves.

    ``fixed_global``: every run uses the same global batch, seed and data
    order, so synchronous data parallelism should give the same curve (up to
    float round-off). ``fixed_per_replica``: each replica keeps
    ``global_batch_size`` samples, so the global batch grows with N; the
    learning rate follows the linear scaling rule with ``warmup_epochs`` of
    warm-up (Goyal et al., 2017).

    Args:
        replicas: replica counts to run, e.g. ``(1, 2)``; 1 is the baseline.
        epochs: epochs per run.
        global_batch_size: the global batch (fixed_global) or per-replica batch (fixed_per_replica).
        data: data source (see ``load_mnist``) or a ``MnistData``.
        seed: the shared seed.
        out_dir: if given, write comparison.json, comparison.csv and convergence.png there.
        modes: one or both of ``MODES``.
        learning_rate: base learning rate.
        warmup_epochs: warm-up length for fixed_per_replica.
        engine: "fit", "loop" or "auto" (per strategy, see ``run_training``).
        verbose: 0 silent; 1 a progress bar across runs.
        backend: "tensorflow" or "jax" (every run in this process; see ``kerasdist.engines.backends``).

    Returns:
        A ``ComparisonResult``.

    Raises:
        KerasdistError: for an empty replica list, an unknown mode, an
            ``out_dir`` another process is writing to, or any training argument error.

    Example:
        >>> result = run_comparison((1, 2), epochs=2, data="sample", out_dir="results")  # doctest: +SKIP
        >>> result.max_abs_loss_difference["fixed_global"]["step"] < 1e-3               # doctest: +SKIP
        True
    """
    plan = _checked_plan(replicas, modes, global_batch_size, dict(
        epochs=epochs, seed=seed, engine=engine, learning_rate=learning_rate, warmup_epochs=warmup_epochs,
        verbose=verbose, backend=backend))
    if out_dir is not None:
        out_dir = checks.path("out_dir", out_dir, "name a folder for the results")
        check_creatable_directory(out_dir)
    if backend == "jax":
        from kerasdist.engines.jax_engine import import_keras_on_jax, on_cpu

        import_keras_on_jax(max(n for _, n, _ in plan))
        virtual_cpus = on_cpu()
    else:
        use_backend(backend)
        configure_replicas(max(n for _, n, _ in plan))
        virtual_cpus = on_virtual_cpus()
    mnist = _data_for(plan, data, seed, verbose)
    # One comparison writes to out_dir at a time; the lock goes when this call returns.
    _out_lock = locking.hold(out_dir, "output directory", "--out") if out_dir is not None else None
    runs = _train_runs(plan, dict(epochs=epochs, data=mnist, seed=seed, engine=engine,
                                  learning_rate=learning_rate, backend=backend), warmup_epochs, verbose)
    comparison = ComparisonResult(runs, _loss_differences(runs), {}, virtual_cpus)
    if out_dir is not None:
        comparison.files = write_comparison(comparison, out_dir)
    return comparison


def _data_for(plan, data, seed, verbose):
    """The data every run trains on, checked to give each run's global batch at least one step."""
    if isinstance(data, data_module.MnistData):
        mnist = data_module.checked(data)
    else:
        mnist = data_module.load_mnist(data, seed, verbose > 0)
    for _, _, batch in plan:
        data_module.steps_per_epoch(len(mnist.y_train), batch)
    return mnist


def _train_runs(plan, options, warmup_epochs, verbose):
    """Train every ``(mode, replicas, global batch)`` of the plan; return ``[(mode, TrainingResult)]``."""
    runs = []
    bar = tqdm(plan, desc="runs", unit="run", disable=not verbose)
    for mode, n, batch in bar:
        bar.set_postfix_str(f"{mode}, replicas={n}")
        scaled = mode == "fixed_per_replica"
        result = run_training(replicas=n, global_batch_size=batch, scale_learning_rate=scaled,
                              warmup_epochs=warmup_epochs if scaled else 0, verbose=0, **options)
        result.model = None  # keep memory flat across runs
        runs.append((mode, result))
    bar.close()
    return runs


def _checked_plan(replicas, modes, global_batch_size, options):
    """Every run's ``(mode, replicas, global batch)``, with every run's options checked before any starts."""
    if isinstance(replicas, (str, bytes)) or not hasattr(replicas, "__iter__"):
        checks.fail("replicas", "a list of integers >= 1", "replicas", replicas, "try (1, 2)")
    counts = sorted({checks.integer("replicas", n, 1, fix="try (1, 2)") for n in replicas})
    if not counts:
        checks.fail("replicas", "a non-empty list of integers >= 1", "replicas", list(replicas),
                    "try (1, 2)")
    modes = (modes,) if isinstance(modes, str) else tuple(modes)
    if not modes or any(mode not in MODES for mode in modes):
        checks.fail("modes", f"among {', '.join(MODES)}", "modes", list(modes), "try ('fixed_global',)")
    global_batch_size = checks.integer("global_batch_size", global_batch_size, 1, fix="try 64")
    plan = [(mode, n, _global_batch(mode, global_batch_size, n)) for mode in modes for n in counts]
    for _, n, batch in plan:
        TrainingOptions(replicas=n, global_batch_size=batch, **options)
    return plan


def _global_batch(mode, global_batch_size, replicas):
    """fixed_per_replica keeps ``global_batch_size`` per replica: the global batch grows with the replicas."""
    return global_batch_size * replicas if mode == "fixed_per_replica" else global_batch_size


def _loss_differences(runs):
    differences = {}
    for mode in dict.fromkeys(m for m, _ in runs):
        results = [r for m, r in runs if m == mode]
        baseline = results[0]
        worst = {"step": 0.0, "epoch": 0.0}
        for other in results[1:]:
            for level, table, key in (("step", "steps", "global_step"), ("epoch", "history", "epoch")):
                base_table, other_table = getattr(baseline, table), getattr(other, table)
                both = "batch_loss" in base_table and "batch_loss" in other_table
                metric = "batch_loss" if both else "loss"
                base_loss = dict(zip(base_table.get(key, []), base_table.get(metric, [])))
                for index, loss in zip(other_table.get(key, []), other_table.get(metric, [])):
                    if index in base_loss:
                        worst[level] = max(worst[level], abs(loss - base_loss[index]))
        if mode != "fixed_global":
            worst["step"] = None  # different global batches: step k is not the same point in training
        differences[mode] = worst
    return differences
