"""Draw the course's diagrams with matplotlib and save them as deterministic SVG files.

One function per diagram; each returns a matplotlib Figure. Saving fixes the SVG hash salt and
leaves out the date, so running the script twice writes the same bytes, and the committed files
can be checked against a fresh drawing (tests/test_diagrams.py).

Example:
    python scripts/draw_diagrams.py                      # into notebooks/figures/
    python scripts/draw_diagrams.py --output-dir /tmp/figures
"""

import argparse
import json
import os
import sys

import matplotlib

matplotlib.use("svg")
import matplotlib.pyplot as plt  # noqa: E402  (after choosing the backend)
from matplotlib import patches  # noqa: E402

DEFAULT_OUTPUT_DIR = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "notebooks", "figures")
SVG_SETTINGS = {"svg.hashsalt": "kerasdist-diagrams", "svg.fonttype": "none", "font.size": 10}

# One colour per role, used the same way in every diagram.
DATA = "#dbe9f6"  # batches and shards
REPLICA = "#fdf0d5"  # a device holding (part of) the model
REDUCE = "#f6d5d5"  # the all-reduce, where replicas wait for each other
UPDATE = "#dcefd9"  # weights and their update
NEUTRAL = "#f2f2f2"
EDGE = "#444444"
ACCENT = "#b03a2e"


def _canvas(width, height, title):
    """A figure whose axes measure width x height units (1 unit = 0.1 inch), without ticks."""
    figure = plt.figure(figsize=(width / 10, height / 10))
    axis = figure.add_axes((0, 0, 1, 1))
    axis.set(xlim=(0, width), ylim=(0, height))
    axis.axis("off")
    axis.text(width / 2, height - 2.5, title, ha="center", va="center", fontsize=13, fontweight="bold")
    return figure, axis


def _box(axis, x, y, width, height, text, color, fontsize=9.5, **text_options):
    """A rounded box with its lower-left corner at (x, y) and text centred in it."""
    axis.add_patch(patches.FancyBboxPatch((x, y), width, height, boxstyle="round,pad=0,rounding_size=1",
                                          facecolor=color, edgecolor=EDGE, linewidth=1))
    axis.text(x + width / 2, y + height / 2, text, ha="center", va="center", fontsize=fontsize,
              linespacing=1.35, **text_options)


def _arrow(axis, start, end, color=EDGE, both=False, text=None, text_offset=(0, 0), **text_options):
    """An arrow from start to end (both ends pointed when both=True), with an optional label."""
    style = "<|-|>" if both else "-|>"
    axis.add_patch(patches.FancyArrowPatch(start, end, arrowstyle=style, mutation_scale=12,
                                           color=color, linewidth=1.4, shrinkA=0, shrinkB=0))
    if text:
        middle = ((start[0] + end[0]) / 2 + text_offset[0], (start[1] + end[1]) / 2 + text_offset[1])
        axis.text(*middle, text, ha="center", va="center", fontsize=8.5, color=color, **text_options)


def sync_step_all_reduce():
    """One synchronous training step of data parallelism with two replicas and an all-reduce.

    Returns:
        The matplotlib Figure.
    """
    figure, axis = _canvas(100, 82, "One synchronous training step, 2 replicas")
    _box(axis, 25, 68, 50, 7, "global batch: B examples (B = per-replica batch x replicas)", DATA)
    centres = (25, 75)
    for replica, centre in enumerate(centres):
        _arrow(axis, (50 + (centre - 50) * 0.4, 68), (centre, 62.5))
        _box(axis, centre - 20, 56, 40, 6.5, f"shard {replica}: B/2 examples", DATA)
        _arrow(axis, (centre, 56), (centre, 52.5))
        _box(axis, centre - 21, 38, 42, 14.5,
             f"replica {replica} (device {replica})\n"
             f"forward + backward pass on its shard\n"
             f"loss$_{replica}$ = (sum of its per-example losses) / B\n"
             f"gradient g$_{replica}$ = d loss$_{replica}$ / d w", REPLICA)
        _arrow(axis, (centre, 38), (centre, 33.5))
    _box(axis, 8, 23, 84, 10.5,
         "all-reduce (SUM): every replica receives g = g$_0$ + g$_1$\n"
         "each loss was divided by the GLOBAL batch B, so the sum is the mean gradient over all B examples\n"
         "synchronous: no replica goes on until every replica has sent its gradient", REDUCE)
    for replica, centre in enumerate(centres):
        _arrow(axis, (centre, 23), (centre, 18.5))
        _box(axis, centre - 21, 9, 42, 9.5,
             f"replica {replica} applies the same update\n"
             "w <- w - optimizer step(g)\nto its copy of the mirrored variables", UPDATE)
    axis.text(50, 4,
              "Every copy of the weights stays identical: one model, trained on the whole global batch.",
              ha="center", va="center", fontsize=9.5, style="italic")
    return figure


def _layers(axis, x, y, width, names, color=REPLICA):
    """A stack of layer boxes, first layer at the bottom; returns the top y."""
    for name in names:
        _box(axis, x, y, width, 4.5, name, color, fontsize=8.5)
        y += 6
    return y - 1.5


def data_vs_model_parallelism():
    """Data parallelism (whole model per device, batch split) beside model parallelism (layers split).

    Returns:
        The matplotlib Figure.
    """
    figure, axis = _canvas(120, 78, "Data parallelism vs model parallelism")
    layers = ("dense_1 (784 -> 256)", "dense_2 (256 -> 256)", "logits (256 -> 10)")

    # Left: data parallelism, one full copy of the model per device.
    axis.text(30, 70, "Data parallelism (this course)", ha="center", fontsize=11, fontweight="bold")
    for device, x in enumerate((6, 34)):
        axis.add_patch(patches.Rectangle((x, 22), 22, 36, facecolor=NEUTRAL, edgecolor=EDGE, linestyle="--"))
        axis.text(x + 11, 55, f"device {device}", ha="center", va="center", fontsize=9, fontweight="bold")
        _layers(axis, x + 1.5, 33, 19, layers)
        axis.text(x + 11, 26, "whole model\n(mirrored weights)", ha="center", va="center", fontsize=8)
        _box(axis, x + 1.5, 10, 19, 6, f"half {device + 1} of the batch", DATA, fontsize=8.5)
        _arrow(axis, (x + 11, 16), (x + 11, 22))
    _arrow(axis, (28, 44), (34, 44), color=ACCENT, both=True)
    axis.text(31, 62, "gradients\nall-reduced\nevery step", ha="center", va="center", fontsize=8,
              color=ACCENT)
    _arrow(axis, (31, 58.5), (31, 46), color=ACCENT)
    axis.text(30, 4, "Splits the BATCH: faster training on more devices,\nlarger global batches.",
              ha="center", va="center", fontsize=9)

    # Right: model parallelism, the layers split across the devices.
    axis.text(90, 70, "Model parallelism", ha="center", fontsize=11, fontweight="bold")
    # The split of lesson 6's TwoDeviceMLP: dense_1 on device 0, dense_2 and logits on device 1.
    for device, (x, names) in enumerate(((66, layers[:1]), (94, layers[1:]))):
        axis.add_patch(patches.Rectangle((x, 22), 22, 36, facecolor=NEUTRAL, edgecolor=EDGE, linestyle="--"))
        axis.text(x + 11, 55, f"device {device}", ha="center", va="center", fontsize=9, fontweight="bold")
        _layers(axis, x + 1.5, 36, 19, names)
        axis.text(x + 11, 26, "part of the model\n(its own weights)", ha="center", va="center", fontsize=8)
    _box(axis, 67.5, 10, 19, 6, "the whole batch", DATA, fontsize=8.5)
    _arrow(axis, (77, 16), (77, 22))
    _arrow(axis, (86.5, 39.4), (95.5, 39.4), color=ACCENT, text="activations", text_offset=(0, 3.2))
    _arrow(axis, (95.5, 37.1), (86.5, 37.1), color=ACCENT, text="their gradients", text_offset=(0, -4.1))
    axis.text(90, 4, "Splits the MODEL: for a model too big\nfor one device's memory.",
              ha="center", va="center", fontsize=9)
    axis.plot([60, 60], [6, 72], color="#999999", linewidth=0.8)
    return figure


def cluster_tf_config():
    """Lesson 5's local cluster: two workers and an evaluator on 127.0.0.1, each with its TF_CONFIG.

    Returns:
        The matplotlib Figure.
    """
    cluster = {"worker": ["127.0.0.1:12345", "127.0.0.1:12346"], "evaluator": ["127.0.0.1:12347"]}
    tasks = [
        ("worker", 0, "worker 0 = chief", "trains; writes the\ncheckpoints and logs", REPLICA),
        ("worker", 1, "worker 1", "trains", REPLICA),
        ("evaluator", 0, "evaluator", "evaluates each new\ncheckpoint; no all-reduce", UPDATE),
    ]
    figure, axis = _canvas(130, 86, "A cluster on one machine, and the TF_CONFIG of each process")
    axis.add_patch(patches.Rectangle((2, 4), 126, 74, facecolor="none", edgecolor="#999999", linestyle="--"))
    axis.text(4, 75.5, "this machine: every task listens on its own port of 127.0.0.1", fontsize=8.5,
              color="#555555", va="center")
    cluster_lines = ['{"cluster": {',
                     f'   "worker": {json.dumps(cluster["worker"][:1])[:-1]},',
                     f'              {json.dumps(cluster["worker"][1])}],',
                     f'   "evaluator": {json.dumps(cluster["evaluator"])}}},']
    for row, (task_type, index, name, role, color) in enumerate(tasks):
        y = 55 - row * 24
        address = cluster[task_type][index]
        _box(axis, 5, y, 30, 15, f"{name}\n{address}\n{role}", color, fontsize=9)
        _arrow(axis, (35, y + 7.5), (41, y + 7.5), color="#999999")
        axis.add_patch(patches.FancyBboxPatch((41, y - 1), 62, 17, boxstyle="round,pad=0,rounding_size=1",
                                              facecolor="white", edgecolor="#999999"))
        axis.text(42.5, y + 14.3, "TF_CONFIG", fontsize=7.5, color="#777777", va="center")
        for line_number, line in enumerate(cluster_lines):
            axis.text(42.5, y + 11 - line_number * 2.6, line, family="monospace", fontsize=8, va="center")
        task = json.dumps({"type": task_type, "index": index})
        axis.text(42.5, y + 11 - 4 * 2.6, f' "task": {task}}}', family="monospace", fontsize=8,
                  va="center", color=ACCENT, fontweight="bold")
    # The all-reduce joins the two workers only; the chief's checkpoints go to the evaluator.
    _arrow(axis, (12, 55), (12, 46), color=ACCENT, both=True, text="all-reduce\nevery step",
           text_offset=(-5.5, 0))
    _box(axis, 108, 39, 18, 10, "checkpoint\ndirectory", NEUTRAL, fontsize=8.5)
    _arrow(axis, (103, 62), (117, 49), color=EDGE, text="chief writes", text_offset=(6.5, 2))
    _arrow(axis, (117, 39), (103, 14), color=EDGE, text="evaluator\nreads", text_offset=(8, 0))
    axis.text(116, 66, "same cluster\nfor every task;\nonly \"task\"\ndiffers", ha="center", va="center",
              fontsize=8.5, color=ACCENT)
    return figure


def keras_distribution_mesh():
    """Lesson 7's two layouts on a mesh of two devices: DataParallel copies the weights and splits the
    batch; ModelParallel splits the hidden Dense kernels by columns (and their biases with them) and keeps
    the batch whole.

    Returns:
        The matplotlib Figure.
    """
    figure, axis = _canvas(124, 80, "keras.distribution: one device mesh, two layouts")
    panels = (
        (4, "DataParallel: mesh (2,), axis \"batch\"",
         ("dense_1/kernel 784 x 256", "dense_2/kernel 256 x 256", "logits/kernel 256 x 10"),
         ("dense_1/kernel 784 x 256", "dense_2/kernel 256 x 256", "logits/kernel 256 x 10"),
         "every weight whole on each device:\nPartitionSpec()", REPLICA),
        (66, "ModelParallel: mesh (1, 2), axes \"batch\", \"model\"",
         ("dense_1/kernel 784 x 128\n+ bias 128 (units 0-127)",
          "dense_2/kernel 256 x 128\n+ bias 128 (units 0-127)", "logits/kernel 256 x 10"),
         ("dense_1/kernel 784 x 128\n+ bias 128 (units 128-255)",
          "dense_2/kernel 256 x 128\n+ bias 128 (units 128-255)", "logits/kernel 256 x 10"),
         "LayoutMap: \"dense.*kernel\" -> (None, \"model\"),\n"
         "\"dense.*bias\" -> (\"model\",); no key for logits: whole", UPDATE),
    )
    for x, title, left, right, note, color in panels:
        axis.text(x + 27, 71, title, ha="center", fontsize=10.5, fontweight="bold")
        for device, (device_x, layers) in enumerate(((x, left), (x + 31, right))):
            axis.add_patch(patches.Rectangle((device_x, 24), 23, 42, facecolor=NEUTRAL, edgecolor=EDGE,
                                             linestyle="--"))
            axis.text(device_x + 11.5, 63, f"device {device} (cpu:{device})", ha="center", va="center",
                      fontsize=9,
                      fontweight="bold")
            for row, name in enumerate(reversed(layers)):
                _box(axis, device_x + 1.5, 27 + row * 11, 20, 8.5, name,
                     REPLICA if "(units" not in name else color, fontsize=7.5)
        axis.text(x + 27, 19, note, ha="center", va="center", fontsize=8)
        axis.plot([x - 2, x + 56], [14.5, 14.5], color="#cccccc", linewidth=0.6)
    # Left: the batch is split along the batch axis; XLA inserts the all-reduce of the gradients.
    for device, device_x in enumerate((4, 35)):
        _box(axis, device_x + 1.5, 5, 20, 6, f"half {device + 1} of the global batch", DATA, fontsize=8)
    _arrow(axis, (27.5, 45), (34.5, 45), color=ACCENT, both=True)
    axis.text(31, 40, "gradients\nall-reduced", ha="center", va="center", fontsize=7.5, color=ACCENT)
    # Right: the whole batch on both devices; activations move between the devices.
    _box(axis, 67.5, 5, 51, 6, "the whole global batch on both devices (batch axis of size 1)", DATA,
         fontsize=8)
    _arrow(axis, (89.5, 45), (96.5, 45), color=ACCENT, both=True)
    axis.text(93, 40, "activations\ngathered", ha="center", va="center", fontsize=7.5, color=ACCENT)
    axis.plot([62, 62], [4, 74], color="#999999", linewidth=0.8)
    return figure


DIAGRAMS = {
    "sync_step_all_reduce.svg": sync_step_all_reduce,
    "data_vs_model_parallelism.svg": data_vs_model_parallelism,
    "cluster_tf_config.svg": cluster_tf_config,
    "keras_distribution_mesh.svg": keras_distribution_mesh,
}


def draw_all(output_dir):
    """Draw every diagram into output_dir as SVG and return the paths written."""
    os.makedirs(output_dir, exist_ok=True)
    paths = []
    for file_name, draw in DIAGRAMS.items():
        with plt.rc_context(SVG_SETTINGS):
            figure = draw()
            path = os.path.join(output_dir, file_name)
            figure.savefig(path, format="svg", metadata={"Date": None})
        plt.close(figure)
        paths.append(path)
    return paths


def main(argv=None):
    parser = argparse.ArgumentParser(description="Draw the course's diagrams as SVG files.")
    parser.add_argument("--output-dir", default=os.path.normpath(DEFAULT_OUTPUT_DIR),
                        help="folder for the SVG files (default: notebooks/figures)")
    args = parser.parse_args(argv)
    for path in draw_all(args.output_dir):
        print(path)
    return 0


if __name__ == "__main__":
    sys.exit(main())
