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


def plot_grouped_bars(labels, series, ylabel, title, note=None):
    """Grouped bars of several series, each bar annotated with its speed-up over the first label.

    Every bar reads "value" and, for all but the first label, "×s" where s is the first label's
    value in the same series divided by this bar's value (so for times, 2× means twice as fast).

    Args:
        labels: the groups along the x axis, e.g. pipeline variants; the first is the baseline.
        series: ``{name: values}``, one value per label for every series, e.g. seconds per epoch.
        ylabel: the y axis label.
        title: the figure title.
        note: optional text printed under the chart, e.g. how the numbers were measured.

    Returns:
        A matplotlib ``Figure``.

    Example:
        >>> figure = plot_grouped_bars(["read", "cache"], {"alone": [1.0, 0.1], "with a step": [2.0, 1.1]},
        ...                            "seconds per epoch", "Input pipelines")
    """
    lengths = {name: len(values) for name, values in series.items()}
    if any(length != len(labels) for length in lengths.values()):
        raise ValueError(f"every series needs one value per label ({len(labels)}). Received: {lengths}")
    width = 0.8 / len(series)
    figure, axis = plt.subplots(figsize=(1.9 * len(labels) + 2, 4.2 if note else 3.8))
    for index, (name, values) in enumerate(series.items()):
        positions = [x + (index - (len(series) - 1) / 2) * width for x in range(len(labels))]
        bars = axis.bar(positions, values, width, label=name)
        texts = [f"{value:.2f}" if i == 0 else f"{value:.2f}\n×{values[0] / value:.1f}"
                 for i, value in enumerate(values)]
        axis.bar_label(bars, texts, fontsize=8, padding=2)
    axis.set_xticks(range(len(labels)), labels)
    axis.set_ylim(0, 1.3 * max(max(values) for values in series.values()))
    axis.set(ylabel=ylabel, title=title)
    axis.legend(fontsize=8, loc="upper right")
    if note:
        figure.text(0.01, 0.01, note, fontsize=8, style="italic", va="bottom")
    figure.tight_layout(rect=(0, 0.07 if note else 0, 1, 1))
    return figure
