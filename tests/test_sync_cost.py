"""What synchronization costs: the hand-written ring equals the strategies' all-reduce, the alpha-beta
fit recovers known links, and each device's bytes follow the formulas."""

import json
import subprocess
import sys

import numpy as np
import pytest
import tensorflow as tf

from kerasdist import cli
from kerasdist.engines.strategy import make_strategy
from kerasdist.errors import KerasdistError
from kerasdist.measure.sync_cost import (
    LOCAL_TRANSPORTS,
    TRANSPORTS,
    ZERO_MIXED,
    LinkFit,
    _time_in_child,
    _time_over_workers,
    accumulated_step_seconds,
    break_even_local_batch,
    bus_bandwidth,
    cross_device_ops,
    fit_alpha_beta,
    pipeline_bubble,
    predicted_step_seconds,
    ring_allreduce,
    ring_bytes_sent,
    ring_seconds,
    scaling_speedup,
    strategy_allreduce,
    training_state_bytes,
    tree_seconds,
    two_level_allreduce_seconds,
    zero_stage_bytes,
    zero_stage_traffic,
)


@pytest.mark.parametrize("devices", [2, 3, 4, 7])
def test_the_ring_sums_every_device_and_each_sends_2_n_minus_1_over_n_of_the_tensor(devices):
    rng = np.random.default_rng(devices)
    arrays = [rng.normal(size=(5, 6)) for _ in range(devices)]
    summed, steps = ring_allreduce(arrays)
    for result in summed:
        np.testing.assert_allclose(result, np.sum(arrays, axis=0), rtol=1e-12)
    assert [s["phase"] for s in steps] == ["reduce-scatter"] * (devices - 1) + ["all-gather"] * (devices - 1)
    chunk_sizes = [len(c) for c in np.array_split(np.zeros(30), devices)]
    sent = [sum(chunk_sizes[chunk] for step in steps for source, _, chunk in step["sends"] if source == device)
            for device in range(devices)]
    # Each device sends every chunk but one in each phase: 2 (N - 1) / N of the tensor on average.
    assert sum(sent) / devices == pytest.approx(ring_bytes_sent(30, devices))
    assert all(target == (source + 1) % devices for step in steps for source, target, _ in step["sends"])


@pytest.mark.parametrize("transport", LOCAL_TRANSPORTS)
def test_the_hand_ring_equals_mirrored_strategys_all_reduce_on_two_replicas(transport):
    values = [np.arange(10, dtype="float32") * (r + 1) + 0.25 for r in range(2)]
    by_strategy = strategy_allreduce(values, transport)
    by_hand, _ = ring_allreduce(values)
    assert len(by_strategy) == 2
    for theirs, ours in zip(by_strategy, by_hand):
        np.testing.assert_allclose(theirs, ours, rtol=1e-6)


def test_the_transports_are_a_plain_mirrored_strategys_default_and_reduction_to_one_device():
    # Only built, never run: a collective all-reduce here would clash with another test's.
    plain = tf.distribute.MirroredStrategy(["/cpu:0", "/cpu:1"], cross_device_ops=cross_device_ops(TRANSPORTS[0]))
    assert type(plain.extended._cross_device_ops).__name__ == "CollectiveAllReduce"
    assert type(cross_device_ops(TRANSPORTS[1])).__name__ == "ReductionToOneDevice"
    assert type(make_strategy("mirrored", 2, verbose=False).extended._cross_device_ops).__name__ == \
        "ReductionToOneDevice"


@pytest.mark.slow  # timed all-reduces (about 12 s): make test
def test_an_all_reduce_is_timed_on_either_cross_device_ops():
    for transport in LOCAL_TRANSPORTS:
        small, large = _time_in_child(transport, 2, (1 << 10, 1 << 24), repeats=3, timeout_s=300)
        assert 0 < small < 60 and 0 < large < 60  # ordering under load: the slow test


@pytest.mark.slow  # 2 processes (about 12 s): make test
def test_two_worker_processes_all_reduce_over_loopback_and_a_missing_peer_is_one_error():
    small, large = _time_over_workers(2, (1 << 10, 1 << 22), repeats=2, timeout_s=300)
    assert 0 < small < 60 and 0 < large < 60  # ordering under load: the slow test
    with pytest.raises(KerasdistError, match="timing 2 worker processes over loopback took over 3 s"):
        _time_over_workers(2, (1 << 10,), repeats=1, timeout_s=3)


def test_the_fit_recovers_a_known_link_from_noisy_timings():
    rng = np.random.default_rng(0)
    sizes = np.geomspace(1e3, 64e6, 12)
    for devices, alpha, beta in [(2, 30e-6, 1 / 5e9), (4, 2e-3, 1 / 1.25e8)]:
        timings = ring_seconds(sizes, devices, alpha, beta) * rng.uniform(0.97, 1.03, sizes.size)
        fit = fit_alpha_beta(sizes, timings, devices)
        assert fit.alpha == pytest.approx(alpha, rel=0.06)
        assert fit.beta == pytest.approx(beta, rel=0.06)
        assert 0 < fit.relative_rms_error < 0.05
        assert fit.seconds(1e6) == pytest.approx(ring_seconds(1e6, devices, alpha, beta), rel=0.06)


def test_a_latency_that_noise_makes_negative_is_zero():
    sizes = np.array([1e6, 1e7, 1e8])
    fit = fit_alpha_beta(sizes, sizes * 1e-9 - 1e-6 * np.array([1, 0, 0]) + 1e-9, 2)
    assert fit.alpha == 0 and fit.beta > 0


def test_bad_timings_are_one_clear_error():
    with pytest.raises(ValueError, match="2 or more"):
        fit_alpha_beta([1e3], [1e-3], 2)
    with pytest.raises(ValueError, match="positive seconds"):
        fit_alpha_beta([1e3, 1e4], [1e-3, 0.0], 2)


def test_a_tree_pays_fewer_latencies_and_more_bytes_than_a_ring_on_many_devices():
    assert tree_seconds(8, 64, alpha=1.0, beta=0.0) == 12 < ring_seconds(8, 64, alpha=1.0, beta=0.0) == 126
    assert tree_seconds(1e9, 64, alpha=0.0, beta=1.0) > ring_seconds(1e9, 64, alpha=0.0, beta=1.0)


def test_above_the_break_even_batch_computing_outlasts_the_all_reduce():
    link = LinkFit(alpha=50e-6, beta=1 / 10e9, devices=4, relative_rms_error=0.0)
    batch = break_even_local_batch(flops_per_sample=1.6e6, flop_rate=1e12, gradient_bytes=1.1e6, link=link)
    compute = batch * 1.6e6 / 1e12
    assert compute == pytest.approx(link.seconds(1.1e6))
    assert predicted_step_seconds(batch, 1.6e6, 1e12, 1.1e6, link) == pytest.approx(2 * compute)
    # In one bucket nothing overlaps; in many, all but the last bucket hide behind the backward pass.
    assert predicted_step_seconds(batch, 1.6e6, 1e12, 1.1e6, link, buckets=1) == pytest.approx(2 * compute)
    hidden = predicted_step_seconds(4 * batch, 1.6e6, 1e12, 1.1e6, link, buckets=2)
    assert 4 * compute < hidden < 4 * compute + link.seconds(1.1e6)


def test_buckets_pay_a_latency_each_so_too_many_are_slower():
    latency_bound = LinkFit(alpha=1e-3, beta=1e-12, devices=8, relative_rms_error=0.0)
    steps = [predicted_step_seconds(64, 1e6, 1e12, 4e6, latency_bound, buckets=k) for k in (1, 4, 16)]
    assert steps[0] < steps[1] < steps[2]


def test_speedup_is_n_without_communication_and_less_with_it():
    free = scaling_speedup([1, 2, 8], 64, 1e6, 1e12, 4e6, alpha=0.0, beta=0.0)
    assert free == pytest.approx([1, 2, 8])
    slow = scaling_speedup([1, 2, 8], 64, 1e6, 1e12, 4e6, alpha=1e-5, beta=1e-9)
    assert slow[0] == 1 and slow[1] < 2 and slow[2] < 8
    assert scaling_speedup([8], 64, 1e6, 1e12, 2e6, 1e-5, 1e-9)[0] > slow[2]  # bfloat16 gradients: half the bytes


def test_a_pipelines_bubble_shrinks_with_micro_batches():
    assert pipeline_bubble(1, 1) == 0
    assert pipeline_bubble(4, 1) == 0.75
    assert pipeline_bubble(4, 4) > pipeline_bubble(4, 32) > 0


def test_each_devices_bytes_are_replicated_or_sharded_as_the_formula_says():
    parameters = 269_322  # the course's MLP
    replicated = training_state_bytes(parameters, 4)
    sharded = training_state_bytes(parameters, 4, sharded=True)
    assert replicated["total"] == 16 * parameters
    assert sharded["weights"] == -(-4 * parameters // 4)
    assert sharded["total"] == pytest.approx(replicated["total"] / 4, abs=4)
    mixed = training_state_bytes(parameters, 1, precision=ZERO_MIXED)
    assert mixed["total"] == 16 * parameters and mixed["float32 master weights"] == 4 * parameters
    with pytest.raises(ValueError, match="precision must be one of"):
        training_state_bytes(parameters, 4, precision="fp8")


def test_sync_cost_refuses_one_replica_and_gives_up_on_a_slow_transport_in_one_line(capsys):
    assert cli.main(["sync-cost", "--replicas", "1,2"]) == 2
    assert capsys.readouterr().err == ("kerasdist: error: --replicas must be 2 or more each and --repeats 1 or "
                                       "more. Received: --replicas 1,2 --repeats 5\n")
    assert cli.main(["sync-cost", "--replicas", "2", "--timeout-s", "0.5"]) == 2
    assert capsys.readouterr().err == ("kerasdist: error: timing the collective ring on 2 replicas took over "
                                       "0.5 s; try fewer or smaller sizes\n")


@pytest.mark.slow
def test_sync_cost_fits_each_transport_of_this_machine():
    done = subprocess.run([sys.executable, "-m", "kerasdist", "sync-cost", "--replicas", "2", "--repeats", "2",
                           "--json"], capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-2000:]
    lines = done.stdout.strip().splitlines()
    assert [line.split(",")[0] for line in lines[1:5]] == list(TRANSPORTS)
    for row in json.loads(lines[-1])["transports"]:
        assert row["replicas"] == 2 and row["alpha"] >= 0 and row["bandwidth"] > 0
        assert row["seconds"][-1] > row["seconds"][0]  # 64 MiB takes longer than 1 KiB


@pytest.mark.parametrize("devices", [1, 2, 8, 64])
def test_zero_stages_keep_4_plus_12_over_n_2_plus_14_over_n_and_16_over_n_bytes_and_only_stage_3_sends_more(devices):
    assert [zero_stage_bytes(stage, devices) for stage in (0, 1, 2, 3)] == pytest.approx(
        [16, 4 + 12 / devices, 2 + 14 / devices, 16 / devices])
    assert zero_stage_bytes(3, devices, "float32") == pytest.approx(16 / devices)
    ring = ring_bytes_sent(1.0, devices)
    assert [zero_stage_traffic(stage, devices) for stage in (0, 1, 2)] == pytest.approx([ring] * 3)
    assert zero_stage_traffic(3, devices) == pytest.approx(1.5 * ring)
    with pytest.raises(ValueError, match="stage must be one of"):
        zero_stage_bytes(4, devices)


def test_accumulation_pays_one_all_reduce_per_k_micro_batches():
    link = LinkFit(alpha=1e-5, beta=1e-9, devices=8, relative_rms_error=0.0)
    one = accumulated_step_seconds(100, 1, 1e6, 1e12, 4e6, link)
    four = accumulated_step_seconds(100, 4, 1e6, 1e12, 4e6, link)
    assert one == pytest.approx(predicted_step_seconds(100, 1e6, 1e12, 4e6, link))
    assert four == pytest.approx(predicted_step_seconds(400, 1e6, 1e12, 4e6, link))
    assert four - one == pytest.approx(3 * 100 * 1e6 / 1e12)  # three more micro-batches, no more all-reduces


def test_a_two_level_all_reduce_is_a_ring_per_level_and_beats_a_flat_ring_over_the_slow_link():
    nbytes, fast, slow = 1e8, (5e-6, 1 / 450e9), (5e-6, 1 / 50e9)
    # One node: the ring inside it; one device per node: the ring across the nodes.
    assert two_level_allreduce_seconds(nbytes, 1, 8, *fast, *slow) == pytest.approx(ring_seconds(nbytes, 8, *fast))
    assert two_level_allreduce_seconds(nbytes, 8, 1, *fast, *slow) == pytest.approx(ring_seconds(nbytes, 8, *slow))
    expected = (2 * 7 * fast[0] + 2 * 7 / 8 * nbytes * fast[1]) + (2 * 7 * slow[0] + 2 * 7 / 8 * nbytes / 8 * slow[1])
    assert two_level_allreduce_seconds(nbytes, 8, 8, *fast, *slow) == pytest.approx(expected)
    assert two_level_allreduce_seconds(nbytes, 8, 8, *fast, *slow) < ring_seconds(nbytes, 64, *slow)


def test_nccl_tests_bus_bandwidth_is_the_algorithm_bandwidth_times_2_n_minus_1_over_n():
    nbytes, devices, beta = 64e6, 4, 1e-9
    seconds = ring_seconds(nbytes, devices, 0.0, beta)
    assert bus_bandwidth(nbytes / seconds, devices) == pytest.approx(1 / beta)
