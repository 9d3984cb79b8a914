"""What the lessons state about TensorFlow, Keras and JAX, asserted against the installed libraries.

Each test pins one behaviour a lesson teaches and that a new release could change; when one fails
after an upgrade, the lesson named in its docstring says something false and must change with it.
This process has 2 virtual CPU replicas (tests/conftest.py); claims that need other devices or the
JAX backend run in a fresh, bounded process.
"""

import contextlib
import inspect
import json
import os
import pathlib
import subprocess
import sys
import textwrap

import keras
import numpy as np
import pytest
import tensorflow as tf
from tensorflow.python.framework import config as tf_config

KERAS_SOURCE = pathlib.Path(keras.__file__).parent / "src"


@pytest.fixture(scope="module")
def strategy():
    """A plain tf.distribute.MirroredStrategy over this process's two CPU devices (no kerasdist choice)."""
    devices = [device.name for device in tf.config.list_logical_devices("CPU")][:2]
    return tf.distribute.MirroredStrategy(devices)


def per_replica(strategy, value):
    """The components of a mirrored variable or per-replica value, as NumPy arrays."""
    return [np.array(component) for component in strategy.experimental_local_results(value)]


@contextlib.contextmanager
def op_determinism_restored():
    """Leave TensorFlow's op determinism (process-wide; kerasdist's deterministic runs turn it on) as it was."""
    was_deterministic = tf_config.is_op_determinism_enabled()
    try:
        yield
    finally:
        (tf_config.enable_op_determinism if was_deterministic else tf_config.disable_op_determinism)()


def run_fresh(code, timeout=180, **environment):
    """Run ``code`` in a fresh Python process (bounded); return the JSON object it prints last."""
    done = subprocess.run([sys.executable, "-c", textwrap.dedent(code)], capture_output=True, text=True,
                          timeout=timeout, env={**os.environ, "TF_CPP_MIN_LOG_LEVEL": "3", **environment})
    assert done.returncode == 0, done.stderr[-2000:]
    return json.loads(done.stdout.strip().splitlines()[-1])


def test_a_plain_mirrored_strategy_all_reduces_with_collective_ring_on_cpus(strategy):
    """Lesson 06: TF 2.21's MirroredStrategy picks CollectiveAllReduce (RING on CPUs and virtual GPUs, NCCL on
    physical GPUs); ReductionToOneDevice is kerasdist's own choice for CPUs."""
    cross_device_ops = strategy.extended._cross_device_ops
    assert type(cross_device_ops).__name__ == "CollectiveAllReduce"
    assert cross_device_ops._options.implementation == tf.distribute.experimental.CommunicationImplementation.RING


def test_keras_weights_are_mirrored_with_aggregation_none_and_a_replica_write_stays_local(strategy):
    """Lesson 01: a write inside a replica step changes only that replica's copy; only the optimizer's
    cross-replica update keeps the copies equal."""
    with strategy.scope():
        layer = keras.layers.Dense(2)
        layer.build((None, 3))
    kernel = layer.kernel.value
    assert type(kernel).__name__ == "MirroredVariable"
    assert kernel.aggregation == tf.VariableAggregation.NONE

    @tf.function
    def write_replica_id():
        def step():
            replica = tf.distribute.get_replica_context().replica_id_in_sync_group
            layer.kernel.assign(tf.fill(layer.kernel.shape, tf.cast(replica, tf.float32)))
        strategy.run(step)

    write_replica_id()
    first, second = per_replica(strategy, kernel)
    assert (first == 0).all() and (second == 1).all()
    assert (layer.kernel.numpy() == 0).all()  # reading (and saving) gives replica 0's copy


def _moving_means(strategy, synchronized):
    keras.utils.set_random_seed(0)
    x = np.random.normal(size=(64, 4)).astype("float32")
    x[32:] += 3.0  # replica 1's half of each batch has another mean
    y = np.random.normal(size=(64, 3)).astype("float32")
    with strategy.scope():
        model = keras.Sequential([keras.Input((4,)), keras.layers.BatchNormalization(synchronized=synchronized),
                                  keras.layers.Dense(3)])
        model.compile(optimizer=keras.optimizers.SGD(0.01), loss="mse")
    model.fit(tf.data.Dataset.from_tensor_slices((x, y)).batch(64), epochs=2, verbose=0)
    return per_replica(strategy, model.layers[0].moving_mean.value), per_replica(strategy, model.layers[1].kernel.value)


def test_batch_normalization_statistics_part_across_replicas_unless_synchronized(strategy):
    """Lessons 01 and 03: BatchNormalization's moving statistics are written by each replica alone."""
    means, kernels = _moving_means(strategy, synchronized=False)
    assert np.abs(means[0] - means[1]).max() > 0.05
    assert np.array_equal(kernels[0], kernels[1])  # the weights the optimizer updates stay equal
    means, kernels = _moving_means(strategy, synchronized=True)
    assert np.array_equal(means[0], means[1]) and np.array_equal(kernels[0], kernels[1])


def test_every_replica_draws_the_same_dropout_mask(strategy):
    """Lessons 01 and 03: dropout looks at no other example, but its seed state is one mirrored variable,
    so each replica draws the mask of the first rows of the one-device batch."""
    ones = tf.ones((8, 6))
    keras.utils.set_random_seed(0)
    with strategy.scope():
        dropout = keras.layers.Dropout(0.5, seed=1)
    batches = strategy.experimental_distribute_dataset(tf.data.Dataset.from_tensors(ones))
    masks = tf.function(lambda x: strategy.run(lambda t: dropout(t, training=True), args=(x,)))(next(iter(batches)))
    first, second = per_replica(strategy, masks)
    keras.utils.set_random_seed(0)
    alone = keras.layers.Dropout(0.5, seed=1)
    one_device = tf.function(lambda x: alone(x, training=True))(ones).numpy()
    assert np.array_equal(first, second)
    assert np.array_equal(first, one_device[:4]) and not np.array_equal(first, one_device[4:])


def _kernel_after_one_step(strategy, clipnorm):
    keras.utils.set_random_seed(0)
    x = np.random.normal(size=(8, 4)).astype("float32")
    y = np.random.normal(size=(8, 1)).astype("float32")
    with strategy.scope():
        model = keras.Sequential([keras.Input((4,)), keras.layers.Dense(1, kernel_initializer="ones")])
        model.compile(optimizer=keras.optimizers.SGD(0.1, clipnorm=clipnorm), loss="mse")
    model.fit(tf.data.Dataset.from_tensor_slices((x, y)).batch(8), epochs=1, verbose=0)
    return model.layers[0].kernel.numpy()


def test_keras_clips_each_replicas_partial_gradient_before_the_all_reduce(strategy):
    """Lessons 01 and 03: with clipnorm, N replicas no longer take one device's step."""
    one_device = tf.distribute.OneDeviceStrategy("/cpu:0")
    assert np.allclose(_kernel_after_one_step(strategy, None), _kernel_after_one_step(one_device, None), atol=1e-6)
    clipped_on_replicas = _kernel_after_one_step(strategy, 0.01)
    clipped_on_one_device = _kernel_after_one_step(one_device, 0.01)
    # One device clips the whole gradient to norm 0.01; two replicas each clip their half to 0.01 and sum.
    assert np.linalg.norm(clipped_on_one_device - 1) == pytest.approx(0.1 * 0.01, rel=1e-3)
    assert np.linalg.norm(clipped_on_replicas - 1) > 1.5 * np.linalg.norm(clipped_on_one_device - 1)


def test_jit_compile_auto_is_off_for_a_model_built_under_a_strategy(strategy, monkeypatch):
    """Lesson 08: on a machine with a GPU, "auto" turns XLA on, except for a model built in a tf.distribute
    scope (so the guide's code is not XLA-compiled on GPUs) or with op determinism on; on a CPU-only
    machine it is off."""
    def build():
        model = keras.Sequential([keras.Input((4,)), keras.layers.Dense(1)])
        model.compile(optimizer="adam", loss="mse", jit_compile="auto")
        return model

    assert build().jit_compile is False  # this machine has no GPU
    devices = tf.config.list_physical_devices()
    gpu = tf.config.PhysicalDevice(name="/physical_device:GPU:0", device_type="GPU")
    monkeypatch.setattr(tf.config, "list_physical_devices", lambda *kind: devices + [gpu])
    # Op determinism (which kerasdist's deterministic runs turn on, for the whole process) turns "auto" off too.
    with op_determinism_restored():
        tf_config.enable_op_determinism()
        assert build().jit_compile is False
        tf_config.disable_op_determinism()
        assert build().jit_compile is True
        with strategy.scope():
            assert build().jit_compile is False


class _StopAt(keras.callbacks.Callback):
    """Raises at one (epoch, batch), as a crash would; records the first batch each fit() trains."""

    def __init__(self, epoch=None, batch=None):
        super().__init__()
        self.stop_at, self.first, self.epoch = (epoch, batch), None, None

    def on_epoch_begin(self, epoch, logs=None):
        self.epoch = epoch

    def on_train_batch_begin(self, batch, logs=None):
        self.first = self.first or (self.epoch, batch)
        if (self.epoch, batch) == self.stop_at:
            raise RuntimeError("crash")


def test_backup_and_restore_restores_the_epoch_not_the_batch(tmp_path):
    """Lessons 02 and 05: with save_freq in batches BackupAndRestore writes the batch it saved at, but a
    resumed fit() starts the interrupted epoch again from its first batch."""
    data = tf.data.Dataset.from_tensor_slices((tf.ones((40, 4)), tf.ones((40, 1)))).batch(4)  # 10 batches

    def fit(*callbacks):
        model = keras.Sequential([keras.Input((4,)), keras.layers.Dense(1)])
        model.compile(optimizer="sgd", loss="mse")
        backup = keras.callbacks.BackupAndRestore(str(tmp_path), save_freq=3, delete_checkpoint=False)
        model.fit(data, epochs=3, verbose=0, callbacks=[backup, *callbacks])

    with pytest.raises(RuntimeError, match="crash"):
        fit(_StopAt(epoch=1, batch=7))
    saved = json.loads((tmp_path / "training_metadata.json").read_text())
    # Every 3rd batch counted across epochs: batches 2, 5 and 8 of epoch 1, then 1 and 4 of epoch 2 (0-based).
    assert saved == {"epoch": 1, "batch": 4}
    resumed = _StopAt()
    fit(resumed)
    assert resumed.first == (1, 0)


def test_keras_has_no_parameter_server_support():
    """Lesson 06: Keras 3 has no ParameterServerStrategy / ClusterCoordinator support."""
    hits = [path for path in KERAS_SOURCE.rglob("*.py")
            if "ParameterServerStrategy" in path.read_text() or "ClusterCoordinator" in path.read_text()]
    assert hits == []


def test_the_collective_timeout_is_meant_for_debugging():
    """Lesson 05: TensorFlow documents CommunicationOptions(timeout_seconds=...) as a debugging aid."""
    documentation = " ".join(tf.distribute.experimental.CommunicationOptions.__init__.__doc__.split())
    assert "This should only be used for debugging since it creates a new thread for each collective" in documentation


def test_an_unseeded_shuffle_repeats_its_order_under_the_same_global_seed():
    """Lesson 04: workers that run the same program with the same global seed draw the same unseeded order."""
    def first_order():
        return list(tf.data.Dataset.range(50).shuffle(50).take(8).as_numpy_iterator())

    tf.random.set_seed(0)
    first, second = first_order(), first_order()
    tf.random.set_seed(0)
    assert first != second and first_order() == first


def test_compute_average_loss_divides_by_the_local_batch_times_the_replicas(strategy):
    """Lessons 01 and 06: without global_batch_size, compute_average_loss divides by the per-replica batch
    times the number of replicas; with it, by the global batch given."""
    def losses(per_example):
        return (tf.nn.compute_average_loss(per_example),
                tf.nn.compute_average_loss(per_example, global_batch_size=10))

    values = strategy.run(losses, args=(tf.ones(3),))
    assert [float(v) for v in per_replica(strategy, values[0])] == pytest.approx([0.5, 0.5])
    assert [float(v) for v in per_replica(strategy, values[1])] == pytest.approx([0.3, 0.3])


@pytest.mark.slow  # a fresh process
def test_a_distributed_dataset_splits_an_uneven_global_batch_into_rounded_up_shares():
    """Lesson 05: TensorFlow rebatches a global batch of 64 over 3 replicas as 22/22/20 (ceil(64/3) until the
    rest; its docstring says shares differ by at most one); kerasdist refuses such a batch by choice."""
    shares = run_fresh("""
        import json, tensorflow as tf
        cpu = tf.config.list_physical_devices("CPU")[0]
        tf.config.set_logical_device_configuration(cpu, [tf.config.LogicalDeviceConfiguration()] * 3)
        strategy = tf.distribute.MirroredStrategy([d.name for d in tf.config.list_logical_devices("CPU")])
        batch = next(iter(strategy.experimental_distribute_dataset(tf.data.Dataset.range(64).batch(64))))
        print(json.dumps([int(t.shape[0]) for t in strategy.experimental_local_results(batch)]))
    """)
    assert shares == [22, 22, 20]


@pytest.mark.slow  # a fresh process
def test_what_lesson_07_says_of_jax():
    """Lesson 07: JAX's CPU collectives across processes use gloo unless told otherwise; jax_num_cpu_devices
    exists beside XLA_FLAGS; under ModelParallel, Adam's moments take their kernel's layout."""
    pytest.importorskip("jax")
    found = run_fresh("""
        import json, os
        os.environ["KERAS_BACKEND"] = "jax"
        os.environ["XLA_FLAGS"] = "--xla_force_host_platform_device_count=2"
        import jax, keras
        mesh = keras.distribution.DeviceMesh((1, 2), ("batch", "model"), keras.distribution.list_devices())
        layout_map = keras.distribution.LayoutMap(mesh)
        layout_map["dense.*kernel"] = (None, "model")
        with keras.distribution.ModelParallel(layout_map=layout_map, batch_dim_name="batch").scope():
            inputs = keras.Input((8,))
            model = keras.Model(inputs, keras.layers.Dense(4, name="dense")(inputs))
            model.compile(optimizer="adam", loss="mse")
            model.optimizer.build(model.trainable_variables)
        moments = {v.path: str(v.value.sharding.spec) for v in model.optimizer.variables if "kernel" in v.path}
        print(json.dumps({"collectives": jax.config.jax_cpu_collectives_implementation,
                          "num_cpu_devices": hasattr(jax.config, "jax_num_cpu_devices"), "moments": moments}))
    """)
    assert found["collectives"] == "gloo" and found["num_cpu_devices"]
    assert set(found["moments"].values()) == {"PartitionSpec(None, 'model')"}, found["moments"]


def test_adams_step_count_and_rate_are_kept_by_the_first_replica(strategy):
    """Lesson 01: Adam's iteration and learning rate aggregate ONLY_FIRST_REPLICA, its moments NONE."""
    with strategy.scope():
        model = keras.Sequential([keras.Input((4,)), keras.layers.Dense(3)])
        model.compile(optimizer=keras.optimizers.Adam(1e-3), loss="mse")
        model.optimizer.build(model.trainable_variables)
    aggregation = {variable.path.split("/")[-1]: variable.value.aggregation for variable in model.optimizer.variables}
    assert aggregation["iteration"] == aggregation["learning_rate"] == tf.VariableAggregation.ONLY_FIRST_REPLICA
    moments = [value for name, value in aggregation.items() if "momentum" in name or "velocity" in name]
    assert moments and set(moments) == {tf.VariableAggregation.NONE}


def test_synchronized_batch_normalization_all_reduces_three_sums_one_by_one():
    """Lesson 03: the sum, the sum of squares and the count are three separate all-reduces per layer and step."""
    from keras.src.backend.tensorflow import nn

    assert inspect.getsource(nn._compute_moments_sync).count("replica_ctx.all_reduce(") == 3


def test_what_tensorflow_says_of_cluster_roles():
    """Lesson 05: TensorFlow counts the evaluator as a chief (kerasdist does not), and names a worker index
    past the cluster in these words."""
    from tensorflow.python.distribute import multi_worker_util

    cluster = {"chief": ["localhost:1"], "worker": ["localhost:2", "localhost:3"], "evaluator": ["localhost:4"]}
    assert multi_worker_util.is_chief(cluster, "evaluator", 0) is True
    assert multi_worker_util.is_chief(cluster, "worker", 0) is False
    with pytest.raises(ValueError, match=r"^The `task_id` 2 exceeds the maximum id of worker\.$"):
        multi_worker_util._validate_cluster_spec(cluster, "worker", 2)


def test_a_global_batch_that_does_not_divide_is_refused_per_replica():
    """Lesson 05: distribute_datasets_from_function's InputContext refuses 64 over 3 replicas."""
    context = tf.distribute.InputContext(num_input_pipelines=1, input_pipeline_id=0, num_replicas_in_sync=3)
    with pytest.raises(ValueError):
        context.get_per_replica_batch_size(64)
    assert context.get_per_replica_batch_size(66) == 22


def test_the_fault_tolerance_pieces_the_lessons_name_exist():
    """Lessons 02, 05 and 07: TensorFlow's preemption handler, Keras' Orbax checkpoint callback (which does
    not restore); no SidecarEvaluator in Keras 3."""
    assert hasattr(tf.distribute.experimental, "PreemptionCheckpointHandler")
    assert hasattr(keras.callbacks, "OrbaxCheckpoint")
    # OrbaxCheckpoint only saves, as ModelCheckpoint does; BackupAndRestore restores when training begins.
    assert "on_train_begin" in vars(keras.callbacks.BackupAndRestore)
    assert not {"on_train_begin", "restore"} & set(vars(keras.callbacks.OrbaxCheckpoint))
    assert not [path for path in KERAS_SOURCE.rglob("*.py") if "SidecarEvaluator" in path.read_text()]


def test_predict_under_a_strategy_normalises_each_shard_with_its_own_replicas_statistics(strategy):
    """Lessons 01 and 03: predict() and evaluate() run in replica steps, where each replica reads its own copy
    of BatchNormalization's moving statistics; get_weights() and save() read replica 0's."""
    with strategy.scope():
        model = keras.Sequential([keras.Input((4,)), keras.layers.BatchNormalization()])
    moving_mean = model.layers[0].moving_mean.value
    for component, value in zip(moving_mean.values, (0.0, 10.0)):
        component.assign(tf.fill((4,), value))
    predictions = model.predict(tf.data.Dataset.from_tensors(tf.ones((8, 4))), verbose=0)
    assert np.allclose(predictions[:4], 1.0, atol=1e-2) and np.allclose(predictions[4:], -9.0, atol=1e-2)
    assert (model.get_weights()[2] == 0).all()  # gamma, beta, moving_mean: replica 0's copy


def _fit_two_steps_per_call(strategy):
    with strategy.scope():
        model = keras.Sequential([keras.Input((4,)), keras.layers.Dense(1)])
        model.compile(optimizer="sgd", loss="mse", steps_per_execution=2)
    model.fit(tf.data.Dataset.from_tensor_slices((tf.ones((32, 4)), tf.ones((32, 1)))).batch(8), verbose=0)


def test_fit_with_steps_per_execution_fails_under_the_default_all_reduce_only(strategy):
    """Lessons 01 and 04: under MirroredStrategy with TensorFlow's CollectiveAllReduce, fit() with
    steps_per_execution > 1 fails (keras-team/keras#19246); with ReductionToOneDevice it runs."""
    with pytest.raises(tf.errors.InvalidArgumentError, match="You must feed a value for placeholder tensor"):
        _fit_two_steps_per_call(strategy)
    devices = strategy.extended.worker_devices
    _fit_two_steps_per_call(tf.distribute.MirroredStrategy(devices, cross_device_ops=tf.distribute.ReductionToOneDevice()))


def test_fit_compiled_by_xla_fails_under_a_mirrored_strategy_of_two_replicas(strategy):
    """Lesson 08: Keras leaves XLA off under a strategy because fit() compiled by XLA does not run there: one
    XLA cluster would read every replica's copy of a variable (keras-team/keras#19005); on one device it trains."""
    def fit_compiled(scope_of):
        with scope_of.scope():
            model = keras.Sequential([keras.Input((4,)), keras.layers.Dense(3)])
            model.compile(optimizer="adam", loss="mse", jit_compile=True)
        model.fit(np.ones((16, 4), "float32"), np.ones((16, 3), "float32"), batch_size=8, epochs=1, verbose=0)
        return int(model.optimizer.iterations.numpy())

    with op_determinism_restored():
        tf_config.disable_op_determinism()  # Keras drops jit_compile=True while op determinism is on
        with pytest.raises(tf.errors.InvalidArgumentError, match="Trying to access resource"):
            fit_compiled(strategy)
        assert fit_compiled(tf.distribute.get_strategy()) == 2


def test_adam_keeps_each_moment_beside_its_weight_only_when_built_before_fit(strategy):
    """Lessons 06 and 07: Keras' TensorFlow optimizer asks for each moment to be colocated with its weight,
    but a model without a strategy lets fit() build the optimizer while it traces the step, where that request
    is lost (every moment lands on the first device); built eagerly, each moment sits beside its weight."""
    first, second = strategy.extended.worker_devices

    class TwoDevices(keras.Model):
        def __init__(self):
            super().__init__()
            self.near, self.far = keras.layers.Dense(8), keras.layers.Dense(3)

        def build(self, input_shape):
            with tf.device(first):
                self.near.build(input_shape)
            with tf.device(second):
                self.far.build((None, 8))

        def call(self, inputs):
            with tf.device(first):
                hidden = self.near(inputs)
            with tf.device(second):
                return self.far(hidden)

    def moment_devices(build_first):
        model = TwoDevices()
        model.build((None, 4))
        model.compile(optimizer=keras.optimizers.Adam(), loss="mse", jit_compile=False)
        if build_first:
            model.optimizer.build(model.trainable_variables)
        model.fit(np.ones((8, 4), "float32"), np.ones((8, 3), "float32"), verbose=0)
        far = {weight.path.replace("/", "_") for weight in model.far.weights}
        return {tf.DeviceSpec.from_string(variable.value.device).device_index for variable in model.optimizer.variables
                if any(variable.path.endswith(f"{name}_momentum") or variable.path.endswith(f"{name}_velocity")
                       for name in far)}

    assert moment_devices(build_first=False) == {0}
    assert moment_devices(build_first=True) == {1}


def test_gradient_accumulation_fails_in_fit_under_mirrored_strategy(strategy):
    """Lesson 03: Keras applies the accumulated update (its all-reduce included) inside a cond, which
    MirroredStrategy refuses (keras-team/keras#20582, open); on one device it trains."""
    def fit_accumulating(scope_of):
        with scope_of.scope():
            model = keras.Sequential([keras.Input((4,)), keras.layers.Dense(3)])
            model.compile(optimizer=keras.optimizers.Adam(1e-3, gradient_accumulation_steps=2), loss="mse")
        model.fit(np.ones((16, 4), "float32"), np.ones((16, 3), "float32"), batch_size=4, epochs=1, verbose=0)
        return int(model.optimizer.iterations.numpy())

    with pytest.raises(RuntimeError, match="merge_call"):
        fit_accumulating(strategy)
    assert fit_accumulating(tf.distribute.get_strategy()) == 2  # 4 steps, an update every 2


def test_a_checkpoint_can_hold_a_datasets_iterator(tmp_path):
    """Lesson 02: tf.train.Checkpoint(iterator=...) saves and restores the position in a tf.data iterator."""
    iterator = iter(tf.data.Dataset.range(10))
    checkpoint = tf.train.Checkpoint(iterator=iterator)
    next(iterator), next(iterator)
    path = checkpoint.save(str(tmp_path / "ckpt"))
    next(iterator)
    checkpoint.restore(path)
    assert int(next(iterator)) == 2


def test_an_exception_in_fit_skips_the_callbacks_end_of_training():
    """Lesson 02: fit() has no finally: after an exception no on_epoch_end or on_train_end runs."""
    ended = []
    recorder = keras.callbacks.LambdaCallback(on_epoch_end=lambda *_: ended.append("epoch"),
                                              on_train_end=lambda *_: ended.append("train"))
    model = keras.Sequential([keras.Input((4,)), keras.layers.Dense(1)])
    model.compile(optimizer="sgd", loss="mse")
    with pytest.raises(RuntimeError, match="crash"):
        model.fit(tf.ones((40, 4)), tf.ones((40, 1)), batch_size=4, epochs=2, verbose=0,
                  callbacks=[recorder, _StopAt(epoch=0, batch=2)])
    assert ended == []


def test_keras_on_jax_runs_steps_per_execution_as_a_python_loop_of_jitted_steps():
    # Lesson 08: on JAX, steps_per_execution calls the jitted step once per step from Python (only the
    # callbacks run less often); a whole epoch in one compiled call is left to the user (jax.lax.scan).
    from keras.src.backend.jax.trainer import JAXTrainer

    source = inspect.getsource(JAXTrainer._make_function)
    assert "for _ in range(self.steps_per_execution - 1):" in source
    assert "data = next(iterator)" in source and "step_function(state, data)" in source
