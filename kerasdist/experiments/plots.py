"""Matplotlib figures: convergence curves of a comparison, bar charts, and a step-time cost model."""

import matplotlib.pyplot as plt
import matplotlib.ticker
import matplotlib.transforms
import numpy as np

from kerasdist.result import steady_samples_per_s

CPU_REPLICAS_NOTE = ("virtual CPU replicas share the same cores:\n"
                     "more replicas cannot be faster here,\nthey add the all-reduce")
# Two curves of a panel "coincide" when they have the same x values and their y values differ nowhere by
# more than this fraction of the panel's y range: less than a pixel, so one hides the other.
COINCIDE_FRACTION = 1e-3
# Line widths and marker sizes of the 1st, 2nd, 3rd, ... curve of a group that coincides: each one drawn
# over the ones before, narrower, so that the colours of all of them show.
_GROUP_WIDTHS = (2.8, 1.7, 0.7, 0.4)
_GROUP_MARKERS = (("o", 11), ("s", 7.5), ("D", 4.5), ("o", 2.5))


def plot_convergence(comparison):
    """Loss of each step's batch, validation accuracy per epoch and steady-state samples/s of every run.

    The loss panel shows each logged step's own batch loss (``batch_loss``),
    not Keras' running epoch mean, which drops at every epoch boundary. Runs
    whose curves coincide in a panel (the same values, or closer than a pixel,
    such as 1 and N replicas at a fixed global batch) are drawn one over the
    other in narrower lines and smaller markers, and the legend names the run
    each one lies on. The throughput panel leaves out the first epoch
    (tracing) and, when the replicas are virtual CPU devices, says under its
    axis that they share the same cores.

    Args:
        comparison: a ``ComparisonResult``.

    Returns:
        A matplotlib ``Figure`` (shown inline in Jupyter; ``savefig`` it elsewhere).

    Example:
        >>> figure = plot_convergence(run_comparison((1, 2), epochs=2, data="sample"))  # doctest: +SKIP
    """
    several_modes = len({m for m, _ in comparison.runs}) > 1
    labels, loss_curves, accuracy_curves, speeds = [], [], [], []
    for mode, result in comparison.runs:
        plural = "s" if result.replicas > 1 else ""
        label = f"{result.replicas} replica{plural}, batch {result.global_batch_size}"
        labels.append(f"{mode}: {label}" if several_modes else label)
        steps = result.steps
        per_epoch = max(steps["step"]) if steps.get("step") else 1
        epochs_elapsed = [e + s / per_epoch for e, s in zip(steps.get("epoch", []), steps.get("step", []))]
        loss_curves.append((epochs_elapsed, steps.get("batch_loss", steps.get("loss", []))))
        accuracy_curves.append(([e + 1 for e in result.history.get("epoch", [])],
                                result.history.get("val_sparse_categorical_accuracy", [])))
        speeds.append(steady_samples_per_s(result) or 0.0)
    colours = [f"C{index % 10}" for index in range(len(labels))]
    # Dashed lines for N replicas, solid for 1 (as the R package draws them).
    styles = ["-" if result.replicas == 1 else "--" for _, result in comparison.runs]

    figure = plt.figure(figsize=(16, 5.4), layout="constrained")
    loss_axis, accuracy_axis, speed_axis = figure.subplots(1, 3, width_ratios=(1.25, 1, 1.05))
    fixed = comparison.max_abs_loss_difference.get("fixed_global")
    gap = f"\nfixed global batch: max |Δ| vs 1 replica {fixed['step']:.2g}" if fixed else ""
    loss_axis.set(title=f"Training loss per step{gap}", xlabel="epoch", ylabel="loss of each step's batch")
    accuracy_axis.set(title="Validation accuracy", xlabel="epoch", ylabel="accuracy")
    for axis, curves, markers in ((loss_axis, loss_curves, False), (accuracy_axis, accuracy_curves, True)):
        _plot_curves(axis, curves, labels, colours, styles, markers)
        axis.xaxis.get_major_locator().set_params(integer=True)
        axis.grid(alpha=0.3)
        # Under the axis label (0.5 inch below the axis), never over the curves.
        down = matplotlib.transforms.ScaledTranslation(0, -0.5, figure.dpi_scale_trans)
        under_label = axis.transAxes + down
        axis.legend(fontsize=8, loc="upper center", bbox_to_anchor=(0.5, 0), bbox_transform=under_label,
                    frameon=False)

    positions = range(len(speeds))
    bars = speed_axis.barh(positions, speeds, height=0.6, color=colours, alpha=0.75)
    speed_axis.bar_label(bars, fmt="{:,.0f}", fontsize=8, padding=3)
    speed_axis.set_yticks(positions, labels, fontsize=8)
    speed_axis.invert_yaxis()
    speed_axis.set_xlim(0, 1.18 * max(speeds + [1.0]))  # room for the value labels
    speed_axis.xaxis.set_major_locator(matplotlib.ticker.MaxNLocator(5))
    speed_axis.xaxis.set_major_formatter(matplotlib.ticker.StrMethodFormatter("{x:,.0f}"))
    speed_axis.set(title="Steady-state throughput (after epoch 1), this machine", xlabel="samples/s")
    speed_axis.grid(axis="x", alpha=0.3)
    if comparison.virtual_cpus:
        # Under the axis label: the constrained layout makes room for it, and it covers no bar.
        speed_axis.annotate(CPU_REPLICAS_NOTE, xy=(0.5, 0), xycoords=speed_axis.xaxis.label,
                            xytext=(0, -6), textcoords="offset points", ha="center", va="top",
                            fontsize=8, color="tab:red")
    for axis in (loss_axis, accuracy_axis, speed_axis):
        axis.title.set_fontsize(10)
    return figure


def coinciding_curves(curves, fraction=COINCIDE_FRACTION):
    """For each curve, the index of an earlier curve it coincides with, and their largest |difference|.

    Two curves coincide when they have the same x values and their y values
    differ nowhere by more than ``fraction`` of the y range of all curves (one
    hides the other in a plot). Each curve is compared with the earlier curves
    that coincide with no curve before them, so a group of coinciding curves
    points at its first one.

    Args:
        curves: a list of ``(x, y)`` sequences.
        fraction: the tolerance, a fraction of the y range.

    Returns:
        A list, one entry per curve: ``None``, or ``(index, max_abs_difference)``.

    Example:
        >>> coinciding_curves([([1, 2], [0.5, 0.9]), ([1, 2], [0.1, 0.2]), ([1, 2], [0.5, 0.9])])
        [None, None, (0, 0.0)]
    """
    arrays = [(np.asarray(x, dtype=float), np.asarray(y, dtype=float)) for x, y in curves]
    finite = np.concatenate([y[np.isfinite(y)] for _, y in arrays] + [np.zeros(0)])
    span = float(finite.max() - finite.min()) if finite.size else 0.0
    tolerance = fraction * span
    matches = []
    for index, (x, y) in enumerate(arrays):
        match = None
        for earlier in range(index):
            other_x, other_y = arrays[earlier]
            if matches[earlier] is not None or len(x) == 0 or x.shape != other_x.shape \
                    or y.shape != other_y.shape or not np.allclose(x, other_x, rtol=0, atol=1e-9) \
                    or not np.array_equal(np.isnan(y), np.isnan(other_y)):
                continue
            difference = np.abs(y - other_y)[~np.isnan(y)]
            largest = float(difference.max()) if difference.size else 0.0
            if largest <= tolerance:
                match = (earlier, largest)
                break
        matches.append(match)
    return matches


def _plot_curves(axis, curves, labels, colours, styles, markers):
    """Draw every curve; a curve that coincides with an earlier one goes over it, narrower, and says so."""
    matches = coinciding_curves(curves)
    rank = [0] * len(curves)  # the position of each curve in its group of coinciding curves
    for index, match in enumerate(matches):
        if match is not None:
            rank[index] = 1 + sum(1 for m in matches[:index] if m is not None and m[0] == match[0])
    grouped = {m[0] for m in matches if m is not None}
    for index, ((x, y), label) in enumerate(zip(curves, labels)):
        match = matches[index]
        if match is not None:
            earlier, largest = match
            relation = "same values as" if largest == 0 else "lies on"
            difference = "" if largest == 0 else f" (max |Δ| {largest:.1g})"
            label = f"{label}\n    {relation} {labels[earlier]}{difference}"
        in_group = match is not None or index in grouped
        step = min(rank[index], len(_GROUP_WIDTHS) - 1)
        width = _GROUP_WIDTHS[step] if in_group else 1.2
        options = {"color": colours[index], "linestyle": styles[index], "label": label,
                   "zorder": 2 + rank[index], "linewidth": width if markers or in_group else 1.0}
        if markers:
            marker, size = _GROUP_MARKERS[step] if in_group else ("o", 6)
            options.update(marker=marker, markersize=size, linewidth=min(width, 2.0))
        axis.plot(x, y, **options)


def step_time_model(replicas, compute_s, gradient_bytes, bandwidth_bytes_per_s, latency_s, input_s):
    """Modelled seconds per step on N devices: each device's compute + ring all-reduce(N) + input.

    A ring all-reduce of ``gradient_bytes`` over N devices (a reduce-scatter,
    then an all-gather) sends ``2 (N - 1) / N`` times the gradient through
    each link, less than twice the gradient whatever N, and waits
    ``2 (N - 1)`` hop latencies, the only term that grows with N; one device
    needs none. The model adds the terms: it assumes no overlap of
    communication with compute (the all-reduce starts after the whole
    backward pass).

    Args:
        replicas: N, the number of devices.
        compute_s: one device's forward and backward pass of its share of the step's batch (at a fixed
            global batch, the global batch / N: ``kerasdist.measure.hardware.predicted_step`` of it).
        gradient_bytes: size of the gradients (4 bytes per float32 weight).
        bandwidth_bytes_per_s: bandwidth of one link between devices.
        latency_s: latency of one hop.
        input_s: time to prepare one global batch, if not overlapped with compute.

    Returns:
        ``(compute, all_reduce, input)`` seconds.

    Example:
        >>> compute, all_reduce, _ = step_time_model(2, 1e-3, 1e6, 1e10, 1e-5, 0.0)
        >>> compute, round(all_reduce, 6)
        (0.001, 0.00012)
    """
    all_reduce = 0.0
    if replicas > 1:
        all_reduce = 2 * (replicas - 1) / replicas * gradient_bytes / bandwidth_bytes_per_s
        all_reduce += 2 * (replicas - 1) * latency_s
    return compute_s, all_reduce, input_s


def plot_step_time_model(global_batch_size, compute_s, gradient_bytes, bandwidth_bytes_per_s, latency_s,
                         input_s, compute_source):
    """Stacked bars of modelled step time, and the samples/s it implies, for N real devices.

    A labelled cost model, not a measurement: ``step_time_model`` with the
    parameters written on the chart.

    Args:
        global_batch_size: samples per step (fixed as N grows: strong scaling).
        compute_s: ``{N: one device's compute at N devices}``, the device counts to draw.
        gradient_bytes, bandwidth_bytes_per_s, latency_s, input_s: see ``step_time_model``.
        compute_source: where the compute times come from, written on the chart.

    Returns:
        A matplotlib ``Figure``.

    Example:
        >>> figure = plot_step_time_model(1024, {1: 4e-3, 2: 2e-3}, 1.1e6, 1e10, 1e-5, 2e-4, "assumed")
    """
    replicas = sorted(compute_s)
    parts = [step_time_model(n, compute_s[n], gradient_bytes, bandwidth_bytes_per_s, latency_s, input_s)
             for n in replicas]
    figure, (time_axis, speed_axis) = plt.subplots(1, 2, figsize=(11, 3.8))
    positions = range(len(replicas))
    bottom = [0.0] * len(replicas)
    for index, (name, color) in enumerate((("compute on each device", "tab:blue"),
                                           ("all-reduce (ring)", "tab:orange"), ("input", "tab:gray"))):
        heights = [1e6 * part[index] for part in parts]
        time_axis.bar(positions, heights, bottom=bottom, label=name, color=color)
        bottom = [b + h for b, h in zip(bottom, heights)]
    time_axis.set_xticks(list(positions), [str(n) for n in replicas])
    time_axis.set(title="MODEL, not a measurement: time per step", xlabel="devices N", ylabel="µs per step")
    time_axis.legend(fontsize=8)
    speeds = [global_batch_size / sum(part) for part in parts]
    speed_axis.plot(replicas, speeds, "o-", label="model")
    speed_axis.plot(replicas, [speeds[0] * n / replicas[0] for n in replicas], ":", color="gray",
                    label="perfect scaling")
    top = max(speeds[0] * max(replicas) / replicas[0], max(speeds))
    speed_axis.set(title="MODEL: samples/s at a fixed global batch", xlabel="devices N", ylabel="samples/s",
                   xticks=replicas, ylim=(0, 1.05 * top))
    speed_axis.legend(fontsize=8, loc="upper left")
    speed_axis.yaxis.set_major_formatter(matplotlib.ticker.StrMethodFormatter("{x:,.0f}"))
    parameters = (f"Cost model: step time = compute on each device + all-reduce(N) + input; global batch "
                  f"{global_batch_size}, compute from {compute_source},\n"
                  f"gradients {gradient_bytes / 1e6:.2f} MB, "
                  f"ring all-reduce over links of {bandwidth_bytes_per_s / 1e9:g} GB/s with "
                  f"{1e6 * latency_s:g} µs per hop (assumed), input {1e6 * input_s:g} µs per step;\n"
                  "no overlap of communication with compute. No GPU was measured.")
    for axis in (time_axis, speed_axis):
        axis.grid(alpha=0.3)
    figure.tight_layout(rect=(0, 0.1, 1, 1))
    figure.text(0.5, 0.01, parameters, ha="center", va="bottom", fontsize=8)
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


def plot_ring_steps(steps, devices):
    """A ring all-reduce's steps as a grid: a row per step, a column per device, each cell the chunk that
    device sends to the next (reduce-scatter adds it there, all-gather copies it).

    Args:
        steps: the steps ``kerasdist.measure.sync_cost.ring_allreduce`` recorded.
        devices: how many devices the ring had.

    Example:
        >>> import numpy as np
        >>> from kerasdist.measure.sync_cost import ring_allreduce
        >>> figure = plot_ring_steps(ring_allreduce([np.ones(8)] * 4)[1], 4)
    """
    figure, axis = plt.subplots(figsize=(1.3 * devices + 2.6, 0.5 * len(steps) + 1.2))
    colours = {"reduce-scatter": "#fdd49e", "all-gather": "#c6dbef"}
    for row, step in enumerate(steps):
        for source, target, chunk in step["sends"]:
            cell = plt.Rectangle((source, row), 1, 1, facecolor=colours[step["phase"]], edgecolor="white")
            axis.add_patch(cell)
            verb = "+=" if step["phase"] == "reduce-scatter" else "copy"
            axis.text(source + 0.5, row + 0.5, f"chunk {chunk} ({verb})\n→ device {target}", ha="center",
                      va="center", fontsize=8)
    axis.set(xlim=(0, devices), ylim=(len(steps), 0), xticks=[d + 0.5 for d in range(devices)],
             xticklabels=[f"device {d}" for d in range(devices)], yticks=[r + 0.5 for r in range(len(steps))],
             yticklabels=[f"{s['phase']} {s['step']}" for s in steps],
             title=f"Ring all-reduce on {devices} devices: what each device sends at each step")
    axis.tick_params(length=0)
    for side in axis.spines.values():
        side.set_visible(False)
    figure.tight_layout()
    return figure


def plot_allreduce_fits(rows):
    """Measured all-reduce seconds against size, log-log, with each transport's fitted alpha-beta ring model.

    Args:
        rows: ``kerasdist.measure.sync_cost.measure_transports``' rows (transport, replicas, nbytes, seconds,
            alpha, beta, relative_rms_error).

    Example:
        >>> row = {"transport": "ring", "replicas": 2, "nbytes": [1e3, 1e6], "seconds": [1e-4, 1e-3],
        ...        "alpha": 5e-5, "beta": 9e-10, "relative_rms_error": 0.02}
        >>> figure = plot_allreduce_fits([row])
    """
    from kerasdist.measure.sync_cost import ring_seconds

    figure, axis = plt.subplots(figsize=(8, 4.6))
    transports = list(dict.fromkeys(row["transport"] for row in rows))
    replica_counts = sorted({row["replicas"] for row in rows})
    for row in rows:
        # One colour per transport; markers and line styles tell the replica counts apart.
        colour = f"C{transports.index(row['transport'])}"
        marker, line = ("o", "-") if replica_counts.index(row["replicas"]) % 2 == 0 else ("s", "--")
        sizes = np.asarray(row["nbytes"], dtype=float)
        label = f"{row['transport']}, {row['replicas']} replicas (fit error {row['relative_rms_error']:.0%})"
        axis.loglog(sizes, row["seconds"], marker, color=colour, label=label, linestyle="none")
        smooth = np.geomspace(sizes.min(), sizes.max(), 60)
        model = ring_seconds(smooth, row["replicas"], row["alpha"], row["beta"])
        axis.loglog(smooth, model, line, color=colour, alpha=0.7)
    axis.set(xlabel="bytes all-reduced (per device)", ylabel="seconds (median)",
             title="All-reduce time: measured (points) and fitted α + β model (lines)")
    axis.grid(True, which="major", alpha=0.3)
    axis.legend(fontsize=8, loc="upper left")
    figure.tight_layout()
    return figure
