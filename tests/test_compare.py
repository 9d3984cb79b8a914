"""Tests for kerasdist/experiments/compare.py and plots.py: 1 vs N replicas, results files, figure."""

import csv
import dataclasses
import json
import re

import keras
import matplotlib.pyplot as plt
import pytest

from helpers import last_json_line, run_cli
from kerasdist import run_comparison
from kerasdist.errors import KerasdistError
from kerasdist.experiments.compare import steady_samples_per_s
from kerasdist.experiments.plots import (
    CPU_REPLICAS_NOTE,
    coinciding_curves,
    plot_convergence,
    plot_step_time_model,
    step_time_model,
)
from kerasdist.model import build_model, learning_rate_for


@pytest.fixture(scope="module")
def comparison(tmp_path_factory, sample_data):
    out = tmp_path_factory.mktemp("compare")
    return run_comparison((1, 2), epochs=2, data=sample_data, out_dir=out, verbose=0,
                          modes=("fixed_global", "fixed_per_replica"))


def test_fixed_global_batch_curves_coincide(comparison):
    difference = comparison.max_abs_loss_difference["fixed_global"]
    assert difference["step"] < 1e-5 and difference["epoch"] < 1e-5
    runs = {(mode, r.replicas): r for mode, r in comparison.runs}
    assert runs["fixed_global", 1].global_batch_size == runs["fixed_global", 2].global_batch_size == 64
    assert runs["fixed_per_replica", 2].global_batch_size == 128
    assert runs["fixed_per_replica", 2].learning_rate == pytest.approx(2e-3)  # linear scaling rule


def test_one_replica_runs_of_both_modes_are_the_same_run(comparison):
    # k = 1: the linear scaling rule's warm-up goes from the base rate to 1 x the base rate, a flat rate.
    runs = {(mode, r.replicas): r for mode, r in comparison.runs}
    unscaled, scaled = runs["fixed_global", 1], runs["fixed_per_replica", 1]
    assert scaled.global_batch_size == unscaled.global_batch_size == 64
    assert scaled.steps["batch_loss"] and scaled.steps["batch_loss"] == unscaled.steps["batch_loss"]
    assert scaled.history["val_loss"] == unscaled.history["val_loss"]


def test_growing_the_global_batch_changes_the_curve(comparison):
    assert comparison.max_abs_loss_difference["fixed_per_replica"]["epoch"] > 1e-3


def test_results_files_are_written(comparison):
    files = comparison.files
    with open(files["figure"], "rb") as stream:
        assert stream.read(8) == b"\x89PNG\r\n\x1a\n"
    with open(files["json"]) as stream:
        saved = json.load(stream)
    assert len(saved["runs"]) == 4 and {"mode", "replicas", "history", "steps"} <= set(saved["runs"][0])
    with open(files["csv"]) as stream:
        rows = list(csv.DictReader(stream))
    assert set(rows[0]) == {"run", "mode", "replicas", "global_batch_size", "level", "index", "metric", "value"}
    epoch_rows = [r for r in rows if r["level"] == "epoch" and r["metric"] == "val_sparse_categorical_accuracy"]
    assert len(epoch_rows) == 4 * 2


def test_step_records_hold_each_batch_loss_whose_mean_is_the_epoch_loss(comparison, sample_data):
    for _, run in comparison.runs:
        steps = run.steps
        per_epoch = len(sample_data.y_train) // run.global_batch_size
        assert steps["step"] == list(range(1, per_epoch + 1)) * 2  # every step logged on the sample
        for epoch, epoch_loss in enumerate(run.history["loss"]):
            batch_losses = [b for e, b in zip(steps["epoch"], steps["batch_loss"]) if e == epoch]
            assert sum(batch_losses) / len(batch_losses) == pytest.approx(epoch_loss, rel=1e-4)
        # The running mean smooths; the batch losses do not: they jump around it.
        assert steps["batch_loss"] != pytest.approx(steps["loss"], abs=1e-3)


def test_steady_throughput_leaves_out_the_first_epoch(comparison):
    for _, run in comparison.runs:
        second = run.history["samples_per_s"][1]
        assert steady_samples_per_s(run) == pytest.approx(second)
    assert all("steady_samples_per_s" in run for run in comparison.to_dict()["runs"])


def test_warmup_ramps_from_the_base_rate_to_k_times_it_as_goyal_et_al():
    # Keras' CosineDecay from η (initial_learning_rate) to kη (warmup_target), then held (alpha=1.0).
    schedule = learning_rate_for(1e-3, 4, scale_with_replicas=True, warmup_steps=10)
    rates = [float(schedule(step)) for step in range(15)]
    assert rates[0] == pytest.approx(1e-3) and rates[10:] == pytest.approx([4e-3] * 5)
    steps_up = [b - a for a, b in zip(rates[:10], rates[1:11])]
    assert steps_up == pytest.approx([3e-4] * 10, rel=1e-5)  # the same increment every step
    unscaled = learning_rate_for(1e-3, 4, warmup_steps=10)  # no scaling: from η to η, never from near zero
    assert {float(unscaled(step)) for step in range(15)} == {float(keras.ops.convert_to_tensor(1e-3))}
    assert learning_rate_for(1e-3, 4, scale_with_replicas=True) == pytest.approx(4e-3)
    flat = learning_rate_for(1e-3, 1, scale_with_replicas=True, warmup_steps=10)  # k = 1: η to 1 x η
    assert {float(flat(step)) for step in range(15)} == {float(keras.ops.convert_to_tensor(1e-3))}


def test_a_warmup_adds_no_optimizer_variable_so_earlier_checkpoints_still_restore():
    # Checkpoints written with a warm-up hold no learning-rate variable; a rebuilt optimizer must not ask for one.
    for replicas in (1, 2):
        built = build_model(learning_rate_for(1e-3, replicas, scale_with_replicas=True, warmup_steps=10))
        assert not [v.path for v in built.optimizer.variables if "learning_rate" in v.path]
    assert [v.path for v in build_model(1e-3).optimizer.variables if "learning_rate" in v.path]


def legend_entries(axis):
    """The legend's texts of an axis, by the run they start with (the run's label is their first line)."""
    return {text.get_text().split("\n")[0]: text.get_text() for text in axis.get_legend().get_texts()}


@pytest.fixture
def convergence_figure():
    """plot_convergence, closed after the test (figures left open pile up in pyplot)."""
    figures = []

    def draw(comparison):
        figures.append(plot_convergence(comparison))
        figures[-1].canvas.draw()
        return figures[-1]

    yield draw
    for figure in figures:
        plt.close(figure)


def test_convergence_legends_name_the_runs_whose_curves_coincide(comparison, convergence_figure):
    # Both 1-replica runs are the same run; at a fixed global batch 2 replicas lie on 1 replica. Each
    # coinciding curve would hide another one, so the legend says which run it lies on.
    loss_axis, accuracy_axis, _ = convergence_figure(comparison).axes
    baseline = "fixed_global: 1 replica, batch 64"
    for axis in (loss_axis, accuracy_axis):
        entries = legend_entries(axis)
        assert entries[baseline] == baseline
        assert entries["fixed_per_replica: 1 replica, batch 64"].endswith(f"same values as {baseline}")
        assert re.search(rf"\n +(lies on|same values as) {baseline}", entries["fixed_global: 2 replicas, batch 64"])
        assert entries["fixed_per_replica: 2 replicas, batch 128"] == "fixed_per_replica: 2 replicas, batch 128"
    # The accuracy panel's coinciding runs are told apart by marker and size, as well as by colour.
    markers = [(line.get_marker(), line.get_markersize()) for line in accuracy_axis.get_lines()]
    assert len(set(markers[:3])) == 3


def test_convergence_legends_follow_the_data_not_the_run_names(comparison, convergence_figure):
    # The same four runs, but the 2-replica fixed-global run's loss moved by a visible 0.05 at one step:
    # its loss curve no longer lies on the 1-replica one (its accuracy still does).
    runs = []
    for mode, run in comparison.runs:
        if (mode, run.replicas) == ("fixed_global", 2):
            losses = list(run.steps["batch_loss"])
            losses[5] += 0.05
            run = dataclasses.replace(run, steps={**run.steps, "batch_loss": losses})
        runs.append((mode, run))
    loss_axis, accuracy_axis, _ = convergence_figure(dataclasses.replace(comparison, runs=runs)).axes
    moved = "fixed_global: 2 replicas, batch 64"
    assert legend_entries(loss_axis)[moved] == moved
    assert "\n" in legend_entries(accuracy_axis)[moved]


def test_convergence_panels_keep_legends_and_the_cpu_note_off_the_data(comparison, convergence_figure):
    figure = convergence_figure(dataclasses.replace(comparison, virtual_cpus=True))
    renderer = figure.canvas.get_renderer()
    loss_axis, accuracy_axis, speed_axis = figure.axes
    for axis in (loss_axis, accuracy_axis):  # the legends sit under the axes, below their labels
        legend = axis.get_legend().get_window_extent(renderer)
        assert not legend.overlaps(axis.get_window_extent(renderer))
        assert legend.y1 <= axis.xaxis.label.get_window_extent(renderer).y0
    notes = [text for text in speed_axis.texts if text.get_text() == CPU_REPLICAS_NOTE]
    assert len(notes) == 1
    note = notes[0].get_window_extent(renderer)
    bar_labels = [text for text in speed_axis.texts if text is not notes[0]]
    assert len(speed_axis.patches) == len(bar_labels) == 4
    for artist in speed_axis.patches + bar_labels + [speed_axis.xaxis.label]:
        assert not note.overlaps(artist.get_window_extent(renderer)), artist
    for label in bar_labels:  # every value label inside the panel, right of its bar
        assert label.get_window_extent(renderer).x1 <= speed_axis.get_window_extent(renderer).x1
    # Under the throughput axis and inside the figure: nothing is cut off.
    assert note.y1 <= speed_axis.get_window_extent(renderer).y0
    assert figure.bbox.x0 <= note.x0 and note.x1 <= figure.bbox.x1 and note.y0 >= figure.bbox.y0
    assert not [text for text in convergence_figure(dataclasses.replace(comparison, virtual_cpus=False))
                .axes[2].texts if text.get_text() == CPU_REPLICAS_NOTE]


def test_coinciding_curves_are_found_from_the_values():
    x = [1, 2, 3]
    curves = [(x, [2.0, 1.0, 0.5]), (x, [2.0, 1.0, 0.5 + 1e-6]), (x, [2.0, 1.0, 0.5]), (x, [2.0, 1.1, 0.5]),
              ([1.5, 2, 3], [2.0, 1.0, 0.5]), ([], [])]
    matches = coinciding_curves(curves)
    assert matches[:3] == [None, (0, pytest.approx(1e-6)), (0, 0.0)]
    assert matches[3:] == [None, None, None]  # 0.1 apart (a visible gap); other steps; no data
    assert coinciding_curves([(x, [0.5, float("nan"), 0.4]), (x, [0.5, float("nan"), 0.4])])[1] == (0, 0.0)


def test_step_time_model_splits_compute_and_pays_for_the_all_reduce():
    one = step_time_model(1, 4e-3, 1e6, 1e10, 1e-5, 1e-4)
    four = step_time_model(4, 1.5e-3, 1e6, 1e10, 1e-5, 1e-4)
    assert one == pytest.approx((4e-3, 0.0, 1e-4))
    assert four[0] == pytest.approx(1.5e-3)  # each device's compute, as given: not 1/N of one device's
    assert four[1] == pytest.approx(1.5 * 1e6 / 1e10 + 6 * 1e-5)


def test_step_time_model_chart_draws_samples_per_second_from_zero():
    figure = plot_step_time_model(4096, {1: 1e-3, 2: 6e-4, 4: 4e-4, 8: 3e-4}, 1e6, 1e10, 1e-5, 1e-4, "assumed")
    speed_axis = figure.axes[1]
    low, high = speed_axis.get_ylim()
    assert low == 0 and high >= max(max(line.get_ydata()) for line in speed_axis.get_lines())
    assert "no overlap of communication with compute" in figure.texts[0].get_text()


def test_unknown_mode_is_refused():
    with pytest.raises(KerasdistError, match="modes must be among fixed_global, fixed_per_replica"):
        run_comparison((1, 2), modes=("fixed_local",))


@pytest.mark.slow
@pytest.mark.xdist_group("training")
def test_compare_cli_runs_1_2_and_4_replicas_in_one_process(tmp_path):
    # A 4-replica MirroredStrategy after a 2-replica one must not reuse the collective group
    # of the first ("joining a group with size 4, but that group has size 2").
    completed = run_cli("compare", "--replicas", "1,2,4", "--epochs", "1", "--data", "sample",
                        "--out", tmp_path, "--json")
    assert completed.returncode == 0, completed.stderr[-2000:]
    record = last_json_line(completed.stdout)
    assert [run["replicas"] for run in record["runs"]] == [1, 2, 4]
    assert record["max_abs_loss_difference"]["fixed_global"]["step"] < 1e-5
    assert (tmp_path / "convergence.png").stat().st_size > 10_000
