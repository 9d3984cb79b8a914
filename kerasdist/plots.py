"""Matplotlib figures: convergence curves of a comparison, and bar charts of throughput."""

import matplotlib.pyplot as plt


def plot_convergence(comparison):
    """Training loss per step, validation accuracy per epoch and samples/s of every run.

    Args:
        comparison: a ``ComparisonResult``.

    Returns:
        A matplotlib ``Figure`` (shown inline in Jupyter; ``savefig`` it elsewhere).

    Example:
        >>> figure = plot_convergence(run_comparison((1, 2), epochs=2, data="sample"))  # doctest: +SKIP
    """
    figure, (loss_axis, accuracy_axis, speed_axis) = plt.subplots(1, 3, figsize=(16, 4.2))
    labels, speeds = [], []
    for mode, result in comparison.runs:
        label = f"{result.replicas} replica{'s' if result.replicas > 1 else ''}, batch {result.global_batch_size}"
        if len({m for m, _ in comparison.runs}) > 1:
            label = f"{mode}: {label}"
        steps = result.steps
        per_epoch = max(steps["step"]) if steps.get("step") else 1
        epochs_elapsed = [e + s / per_epoch for e, s in zip(steps.get("epoch", []), steps.get("step", []))]
        # Dashed lines for N replicas, so a curve lying exactly on the 1-replica one stays visible.
        style = "-" if result.replicas == 1 else "--"
        loss_axis.plot(epochs_elapsed, steps.get("loss", []), style, label=label, alpha=0.8)
        epochs = [e + 1 for e in result.history.get("epoch", [])]
        accuracy_axis.plot(epochs, result.history.get("val_sparse_categorical_accuracy", []), style,
                           marker="o", label=label)
        labels.append(label)
        speeds.append(result.samples_per_s or 0.0)
    fixed = comparison.max_abs_loss_difference.get("fixed_global")
    gap = f" — fixed global batch: max |Δ| vs 1 replica {fixed['step']:.2g}" if fixed else ""
    loss_axis.set(title=f"Training loss{gap}",
                  xlabel="epoch", ylabel="loss (running epoch mean)")
    loss_axis.title.set_fontsize(9)
    accuracy_axis.set(title="Validation accuracy", xlabel="epoch", ylabel="accuracy")
    bars = speed_axis.barh(range(len(speeds)), speeds, color="tab:gray")
    speed_axis.bar_label(bars, fmt="%.0f", fontsize=8)
    speed_axis.set_yticks(range(len(speeds)), labels, fontsize=8)
    speed_axis.invert_yaxis()
    speed_axis.set(title="Throughput (this machine)", xlabel="samples/s")
    for axis in (loss_axis, accuracy_axis):
        axis.xaxis.get_major_locator().set_params(integer=True)
        axis.grid(alpha=0.3)
        axis.legend(fontsize=8)
    figure.tight_layout()
    return figure


def plot_bars(labels, values, ylabel, title):
    """A labelled bar chart, e.g. seconds per epoch of several input pipelines.

    Example:
        >>> figure = plot_bars(["plain", "cache"], [2.0, 1.2], "s/epoch", "Input pipeline")
    """
    figure, axis = plt.subplots(figsize=(1.6 * len(values) + 2, 3.5))
    bars = axis.bar(labels, values, color="tab:blue")
    axis.bar_label(bars, fmt="%.3g")
    axis.set(ylabel=ylabel, title=title)
    figure.tight_layout()
    return figure
