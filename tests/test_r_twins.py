"""The keras3 R twins against their Python lessons: the same key numbers, and lesson 5's Rscript worker.

The key numbers are read from the committed, executed notebooks of both languages, so they are
checked on every machine (with or without keras3): each twin must have printed what its Python
lesson printed, within the tolerance given per number. Rerunning the twins where keras3 is
installed (``bash scripts/run_notebooks.sh --r-twins``) refreshes what is compared, and nbval then
checks that the ``NBVAL_CHECK_OUTPUT`` cells reproduce.
"""

import json
import os
import re
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest

from kerasdist import cluster, load_mnist

NOTEBOOKS = Path(__file__).resolve().parents[1] / "notebooks"
RSCRIPT = shutil.which("Rscript")
NUMBER = r"([-+]?\d[\d.]*(?:e[-+]?\d+)?)"

# Per lesson: (what, pattern for the Python lesson's output, pattern for the R twin's or None if the
# same, tolerance). Every group of every match is compared in order: numbers may differ by at most
# the tolerance, anything else must be the same text.
STRATEGY_ROW = r"^(default|one_device|mirrored|central_storage)\s+"
KEY_NUMBERS = {
    "01_quickstart": [
        ("devices", r"Number of devices: (\d+)", None, 0),
        ("global and per-replica batch", r"global batch (\d+) = (\d+) per replica x (\d+) replicas", None, 0),
        ("Keras variable", r"^(\w+) (dense_1/kernel) \((\d+), (\d+)\)$", None, 0),
        ("mirrored variable", r"^(\w+) with (\d+) components$", None, 0),
        ("test accuracy, fit() in the lesson", r"test loss [\d.]+, test accuracy ([\d.]+)", None, 0.005),
        ("test accuracy, run_training()", r"test accuracy ([\d.]+), \d+ samples/s", None, 0.005),
        ("replicas' summed gradients = mean gradient", r"mean gradient of the global batch: (\w+)", None, 0),
        ("step by hand vs MirroredStrategy", rf"weights after one step: max \|difference\| {NUMBER}", None, 1e-6),
        ("the weights' memory in MiB and MB", r"^= ([\d.]+) (MiB|MB) \(1 (?:MiB|MB) = ([\d,]+) bytes\)$", None, 0),
        ("a model built inside and outside the scope",
         r"^built (inside|outside) the scope: (\w+) with (\d+) replica\(s\), its weights are (\w+)$", None, 0),
    ],
    "02_checkpoints_resume": [
        ("devices", r"Number of devices: (\d+)", None, 0),
        ("steps per epoch and samples dropped",
         r"(\d+) steps per epoch: ([\d,]+) training samples in batches of (\d+), the last (\d+) dropped", None, 0),
        ("keras3 resume",
         r"Resuming from (ckpt-\d+\.keras): (\d+) epoch\(s\) done, training epochs (\d+)\.\.(\d+)", None, 0),
        ("epochs in the CSV log",
         r"epochs in the log: \[(\d+), (\d+), (\d+)\]", r"epochs in the log: (\d+) (\d+) (\d+)", 0),
        ("optimizer step and validation accuracy, by ctime / by epoch",
         r"by (?:ctime|epoch): ckpt-\d+\.keras, optimizer step (\d+), validation accuracy ([\d.]+)",
         None, 0.005),
        ("ModelCheckpoint(save_freq=N) files", r"(\d+) file\(s\) from (ckpt-e\d+-b\d+\.keras) to (ckpt-e\d+-b\d+\.keras)",
         None, 0),
        ("optimizer step in the newest batch checkpoint",
         r"holds optimizer step (\d+) = (\d+) epoch\(s\) x (\d+) batches \+ (\d+) batches", None, 0),
        ("kerasdist checkpoints and kill step",
         r"checkpoints to expect: (ckpt-\d+) \(end of epoch 1\), (ckpt-\d+) \(epoch 2, step (\d+)\); "
         r"SIGKILL once step (\d+) is logged", None, 0),
        ("checkpoint left by SIGKILL", r"latest complete checkpoint: (ckpt-\d+)", None, 0),
        ("kerasdist resume", r"initial_epoch \(0-based\) (\d+), resumed after global step (\d+)", None, 0),
        ("epochs in the kerasdist history", r"epochs in the history: (\d+)", None, 0),
        ("BackupAndRestore: batches of epoch 2",
         r"batches trained per epoch after the restore: \{2: (\d+)\}",
         r"batches trained per epoch after the restore:\s+epoch\s+2\s+(\d+)", 0),
        ("BackupAndRestore: the batch it writes", r"the backup holds epoch (\d+) up to its batch (\d+)", None, 0),
        ("BackupAndRestore: batches replayed", r"BackupAndRestore trained (\d+) batches of epoch 2 twice", None, 0),
        ("BackupAndRestore: optimizer steps", r"optimizer steps in all: (\d+), for (\d+) batches in (\d+) epochs",
         None, 0),
        ("kerasdist: batches of epoch 2", r"kerasdist trained (\d+) batches of epoch 2", None, 0),
    ],
    "03_convergence": [
        ("max |loss difference| per step, per epoch",
         rf"max \|loss difference\|: {NUMBER} over all steps, {NUMBER} over epochs", None, 5e-5),
        ("the same loss at every step", r"^the same loss at every step: (\w+)", None, 0),
        ("left-over digits", r"(\d+) training digits: (\d+) batches of (\d+) and (\d+) left over", None, 0),
        ("uneven split of 5 losses", r"mean of (?:5|\(3\) and \(2\)):\s+([\d.]+)", None, 0),
        ("gradient gap of an uneven batch, %", r"differs from the 1-device one by (\d+)%", None, 1),
        ("cost model", r"model: gradients of ([\d.]+) MB; 8 devices would be ([\d.]+)x as fast", None, 0),
        ("the hardware model's step", r"^(model, NVIDIA H100 SXM, .+)$", None, 0),
        ("the cost model's terms", r"^model, (\d) device\(s\): compute (\d+) us on each; all-reduce (\d+) us, "
         r"of which latency (\d+) us$", None, 0),
        ("steps per epoch", r"global batch (\d+): (\d+) steps per epoch", None, 0),
        ("warm-up from the base rate", r"step 0: ([\d.e-]+) \(the base rate\); end of the warm-up and after: "
         r"([\d.e-]+)", None, 0),
        ("warm-up steps", r"peak learning rate ([\d.e-]+), reached after (\d+) warm-up steps", None, 0),
        ("BatchNormalization, plain and synchronized: the same loss as 1 device",
         r"^((?:synchronized )?BatchNormalization), 2 replicas vs 1 device: the same loss at every step: (\w+)",
         None, 0),
        ("BatchNormalization: loss difference at step 1",
         rf"^BatchNormalization: \|loss difference\| {NUMBER} at step 1", None, 5e-4),
        ("CosineDecay warm-up: the rate at every step", r"the rate at steps 0\.\.(\d+): ([\d. ]+)$", None, 0),
        ("no warm-up run", r"no warm-up: batch (\d+), learning rate ([\d.e-]+) from step 1", None, 0),
        ("samples seen: stretch ends", r"^\s+\(up to\)\s+([\d,]+)\s+([\d,]+)\s+([\d,]+)\s+([\d,]+)\s+([\d,]+)$",
         None, 0),
        ("gradient accumulation: updates and steps", r"updates: (\d+) with batch 128, (\d+) from (\d+) steps of 64",
         None, 0),
        ("gradient accumulation: the same loss at every update", r"^the same loss at every update: (\w+)", None, 0),
    ],
    "04_input_pipelines": [
        ("global batch split",
         r"global batch (\d+) = (\d+) replicas x (\d+) examples; (\d+) steps per epoch", None, 0),
        ("predicted split and steps",
         r"each replica gets (\d+) examples per step; (\d+) steps per epoch", None, 0),
        ("uneven batch of 5", r"^\[(\d+), (\d+)\]$", r"^\[1\] (\d+) (\d+)$", 0),
        ("weights of an uneven split",
         r"an example of the share of (\d+) weighs ([\d.]+) times as much as one of the share of (\d+)",
         None, 0),
        ("per-input-pipeline batch",
         r"input pipeline (\d+) of (\d+): (\d+) replicas in sync, per-replica batch (\d+)", None, 0),
        ("auto-shard policy: the default, kerasdist's",
         r"^(?:default|kerasdist|asked for):\s+(DATA|FILE|AUTO|OFF|HINT)$", None, 0),
        # The unseeded cases depend on how many random ops each twin's program made before: seeded only.
        ("two workers' DATA shards, explicitly seeded shuffle",
         (r"^(shuffle\(seed=0\))\s*: (\d+) keys, worker 0 trains on (\d+), worker 1 on (\d+); "
          r"(\w+) on both, (\w+) on neither"), None, 0),
        ("the simulated shards against TensorFlow's rewrite",
         r"auto-shard rewrite \(policy (\w+)\) kept the same slices as worker_share, for all (\d+) workers", None, 0),
    ],
    "05_multi_worker": [
        ("TensorFlow's is_chief for the evaluator",
         r"^TensorFlow's multi_worker_util.is_chief for the evaluator: (\w+)", None, 0),
        ("where fit() fails: the error and the traceback's frames",
         r"^worker \d: fit\(\) failed: (.+)$|^    ([\w/.]+:\d+ in \w+)$", None, 0),
        ("the custom loop: steps, last loss, weight digest (the same pipeline and loop in both twins)",
         r"^worker \d: custom loop trained (\d+) steps, last loss ([\d.]+)$|^worker \d: weights sha256 (\w+)$",
         None, 0),
        ("fit() fails, the loop trains, identical weights",
         r"^(?:fit\(\) failed|custom loop finished) on every worker: (\w+)|^identical final weights: (\w+)",
         None, 0),
        ("launch: epochs and batch",
         r"epochs trained: (\d+) of (\d+), global batch (\d+) = (\d+) x (\d+)", None, 0),
        ("launch: per-epoch history", r"^epoch (\d+): loss ([\d.]+), val accuracy ([\d.]+)", None, 0.002),
        # The evaluator may skip checkpoints when training outpaces it; it always evaluates the last one.
        ("launch: the evaluator's last checkpoint",
         r"^evaluator: (ckpt-\d+) \(epoch (\d+)\): val accuracy ([\d.]+)\n(?!evaluator)", None, 0.002),
        ("launch: checkpoint names per epoch",
         r"^epoch (\d+) ends after (\d+) steps \((\d+) per epoch\): (ckpt-\d+), \w+ by the evaluator", None, 0),
        ("the evaluator read the chief's newest checkpoint",
         r"^the evaluator read the chief's newest checkpoint: (\w+)", None, 0),
        ("TensorBoard: folders left and their event files", r"^([\w.]+)/: (\d+) event file\(s\)$", None, 0),
        ("TensorBoard: the chief's log", r"^the chief's log: (\d+) losses, steps (\d+)\.\.(\d+)", None, 0),
        ("BackupAndRestore: files, what it saves and reads back, and no task rule",
         (r"^Keras 3 BackupAndRestore writes: (.+)$|^its metadata holds: (.+)$|^the saved epoch changes in: (.+)$"
          r"|^asks for the chief or the task type: (\w+)"), None, 0),
        ("cluster resolvers: the clusters they find", r"^cluster: (\{.*\})$", None, 0),
        ("cluster resolvers: TF_CONFIG task, Slurm task",
         r"^task: (worker \d+)$|^task: (worker \d+) at (\S+), chief: (\w+)$", None, 0),
    ],
    "06_strategy_map": [
        ("strategies that run", r"^(\w+)\s+runs: (\w+), (\d+) replica", None, 0),
        ("how TF's MirroredStrategy and kerasdist's mirrored sum gradients",
         r"^(tf\.distribute\.MirroredStrategy\(devices\)|kerasdist\.make_strategy\('mirrored'\)):\s+(.+)$", None, 0),
        ("ParameterServerStrategy in one process",
         r"^(ParameterServerStrategyV2: .+)$|^(the variable lives on .+)$|^(\d+ steps scheduled, .+)$", None, 0),
        ("Keras 3's source names neither PSS class", r"^Keras 3's source: (\d+) files", None, 0),
        ("pipeline bubble", r"^p = (\d+) stages, m = +(\d+) micro-batch\(es\): each stage idle (\d+)%", None, 0),
        ("strategy table: replicas, variable, max |dw|",
         STRATEGY_ROW + rf"(\d+)\s+(\w+)\s+.*?\s{NUMBER}\s+[\d.]+\s+[\d.]+\s+[\d.]+$", None, 1e-5),
        ("strategy table: fit loss, val acc by evaluate() and by hand",
         STRATEGY_ROW + r".*\s([\d.]+)\s+([\d.]+)\s+([\d.]+)$", None, 0.002),
        ("self-checks that held", r"^(all four strategies trained the same weights, to within 1e-5|"
         r"the file holds one array per variable|every load reproduces the model trained under MirroredStrategy|"
         r"the split model's loss equals the one-device model's, to within 1e-4)$", None, 0),
        ("steady-state steps", r"steady state \(median step of steps (\d+)\.\.(\d+) of the epoch\)", None, 0),
        ("saved under mirrored: variables, copies in memory, arrays in the file",
         r"in memory: (\d+) variables \(weights and optimizer state\), (\d+) copies; in the file: (\d+) arrays",
         None, 0),
        ("optimizer step saved", r"saved under mirrored: optimizer step (\d+)", None, 0),
        ("loaded under another strategy: variable, same weights, max |dlogit|, optimizer step",
         rf"loaded with (.+?)\s+(\w+): same weights (\w+), max \|(?:Δ|d)logit\| {NUMBER}, optimizer step (\d+)",
         None, 1e-5),
        ("model parallel: loss, val acc",
         r"model parallel: [\d.]+ samples/s in the steady state \(default strategy: [\d.]+\), "
         r"loss ([\d.]+), val acc ([\d.]+)", None, 0.002),
        ("numbers stored per device",
         r"^((?:data|model) parallel):\s+\{?'?CPU:0'?(?::| =) (\d+), '?CPU:1'?(?::| =) (\d+)", None, 0),
        ("custom loop: steps, and step 1's loss in parts",
         r"^(\d+) steps; step 1: loss ([\d.]+) = ([\d.]+) \(cross-entropy\) \+ ([\d.]+) \(L2\)", None, 1e-4),
        ("custom loop vs fit(): steps, max |loss difference| per step, max |weight difference|",
         (rf"custom loop vs fit\(\): (\d+) steps, max \|per-step loss difference\| {NUMBER}, "
          rf"max \|weight difference\| {NUMBER}"), None, 1e-4),
        ("custom loop's metrics vs fit() and evaluate()",
         (r"^train accuracy: loop ([\d.]+), fit\(\) ([\d.]+)|^validation loss \+ L2: loop ([\d.]+), "
          r"evaluate\(\) ([\d.]+); validation accuracy: loop ([\d.]+), evaluate\(\) ([\d.]+)"), None, 0.002),
        ("kerasdist's DistributedSteps vs the custom loop",
         (rf"DistributedSteps, (\d+) steps in one call: max \|per-step cross-entropy difference\| {NUMBER}, "
          rf"max \|weight difference\| {NUMBER}"), None, 1e-5),
    ],
    "07_keras_distribution_jax": [
        ("backend, before and after KERAS_BACKEND changes", r"Keras backend: (\w+)$", None, 0),
        ("JAX devices", r"^JAX [\d.]+: (\d+) devices", None, 0),
        ("data source and counts", r"\[(\w+)\]: (\d+) train / (\d+) val / (\d+) test samples", None, 0),
        ("steps and left-over digits", r"(\d+) steps of (\d+) digits; (\d+) digits left over", None, 0),
        ("meshes", r"^mesh shape ([\d ]+) axes ([\w ]+)$", None, 0),
        ("DataParallel: the kernel's layout and shards",
         r"^(dense_1/kernel) \((\d+), (\d+)\) -> (PartitionSpec\(.*\))$|^\s+(TFRT_CPU_\d): \((\d+), (\d+)\)$", None, 0),
        ("MirroredStrategy replicas and steps", r"MirroredStrategy: (\d+) replicas, (\d+) steps", None, 0),
        ("self-checks that held",
         r"^(?:the same loss at every step on all three runs|ModelParallel gives the one-device loss at every step|"
         r"identical weights in both processes|the one-device loss at every (?:logged )?step): (\w+)$", None, 0),
        ("max |loss difference|: DataParallel, MirroredStrategy, ModelParallel, two processes vs one device",
         rf"(?:DataParallel|MirroredStrategy \(TensorFlow\)|ModelParallel|two processes) vs one device(?: \(JAX\))? "
         rf"{NUMBER}", None, 1e-5),
        ("first and last step's loss", r"the loss went from ([\d.]+) to ([\d.]+)", None, 1e-3),
        ("ModelParallel: each weight's layout and pieces",
         r"^(\w+/\w+)\s+\((\d+),? ?(\d*)\)\s+(PartitionSpec\(.*?\))\s+TFRT_CPU_0: \((\d+),? ?(\d*)\)", None, 0),
        ("ModelParallel: split after training", r"its kernel is still split after training: (PartitionSpec\(.*\))", None, 0),
        ("ModelParallel: Adam's moments take their weight's layout",
         r"^(adam\w*/dense_1_\w+)\s+\((\d+),? ?(\d*)\)\s+(PartitionSpec\(.*\))$", None, 0),
        ("the rounding bound of a recovered loss", rf"up to {NUMBER}$", None, 1e-6),
        ("two processes against DataParallel, final weights", rf"vs DataParallel in this kernel {NUMBER}", None, 1e-7),
        ("the JAX engine's processes: devices, processes, steps logged",
         r"^backend (\w+): (\w+) over (\d+) devices in (\d+) processes$|^(\d+) steps logged;", None, 0),
        ("BackupAndRestore: files, epochs resumed", r"the backup holds: (.+)$|second fit\(\) trained epochs (\d+) of (\d+)",
         None, 0),
        ("resumed = uninterrupted", r"resumed = uninterrupted weights: (\w+) ; optimizer steps equal: (\w+)", None, 0),
        ("resumed vs uninterrupted, max |difference|", rf"final weights: max \|difference\| {NUMBER}", None, 1e-6),
        ("OrbaxCheckpoint", r"^keras.callbacks.OrbaxCheckpoint exists: (\w+)", None, 0),
    ],
    # Speeds differ run to run (and the twins run at different moments): only what does not is compared.
    "08_speed": [
        ("data and classes", r"^(Data: .+ samples)$|^classes: (.+)$", None, 0),
        ("jit_compile='auto' of the guide's fit", r"^the guide's fit chose jit_compile=(\w+)", None, 0),
        ("test accuracy after the same epochs, per rung of the ladder",
         r"^(fit \(guide\)|fit, 50 steps/call(?:, XLA)?|kerasdist loop(?: \+ XLA)?|Keras on JAX, fit, 50 steps/call|"
         r"JAX lax\.scan epoch)\s+[\d,]+ samples/s \(steady epochs [\d,]+ to [\d,]+\)\s+[\d.]+x the guide's\s+"
         r"test accuracy ([\d.]+)$", None, 0.01),
        ("test accuracy under mixed_bfloat16",
         r"^(kerasdist loop(?: \+ XLA)?, bfloat16)\s+[\d,]+ samples/s\s+test accuracy ([\d.]+)$", None, 0.01),
        ("bfloat16 instructions", r"^this CPU (has bfloat16 instructions: .+|lacks bfloat16 instructions.*)$", None, 0),
        ("a small gradient in float16 and bfloat16", rf"^a gradient of {NUMBER} in (\w+): {NUMBER}$", None, 0),
        ("mixed_float16: dtypes and LossScaleOptimizer", r"^under mixed_float16: (.+)$", None, 0),
        ("ops in one step's graph", r"^ops in one step's graph: (.+)$", None, 0),
        ("FLOPs per layer", r"^Dense\s+(\d+) x\s+(\d+):\s+([\d,]+) FLOPs forward per sample$", None, 0),
        ("the nominal peak, read from the CPU", r"^nominal peak: (.+)$", None, 0),
        ("the scan variants, in order", r"^(scan, .+?|one jitted step per Python call.*?)\s+[\d,]+ samples/s", None, 0),
        ("training FLOPs per sample", r"^training FLOPs per sample: (.+)$", None, 0),
        ("one step's matrix products: shapes, FLOPs, bytes, intensity",
         r"^(layer \d[\w ]+?)\s+\(\s*(\d+) x\s*(\d+)\) @ \(\s*(\d+) x\s*(\d+)\):\s+([\d.]+) MFLOP, ([\d.]+) MB,"
         r"\s+([\d.]+) FLOP/byte$", None, 0),
        ("Adam's update: bytes, weights, intensity",
         r"^Adam's update, fused: ([\d.]+) MB for ([\d,]+) weights, ([\d.]+) FLOP/byte", None, 0),
        ("gradients under mixed_bfloat16", r"^gradients under mixed_bfloat16: (\[.+\]), ([\d.]+) MB per step$", None, 0),
        ("the hardware model's step", r"^(model, NVIDIA H100 SXM, .+)$", None, 0),
        ("8 GPUs against 1 in the model", r"^model, (tensorfloat32|bfloat16): 8 GPUs on PCIe ([\d.]+)x as fast as 1$",
         None, 0),
        ("mixed bfloat16 on one GPU in the model",
         r"^model: mixed bfloat16 makes one GPU ([\d.]+)x as fast", None, 0),
    ],
    # All-reduce timings and step times differ run to run: only what the model, the data and the published
    # figures fix is compared. The hand ring's gap to a plain sum is not: Python sums in float32, R in double.
    "09_sync_cost": [
        ("devices, parameters and gradient bytes",
         r"^(\d+) devices; the MLP has ([\d,]+) parameters: ([\d.]+) MB of gradients$", None, 0),
        ("the hand loop equals ring_allreduce", r"^the loop above equals sync_cost.ring_allreduce: (\w+)$", None, 0),
        ("the ring's steps", r"^(\d+) steps: ((?:(?:reduce-scatter|all-gather) \d+(?:, )?)+)$", None, 0),
        ("every device ends with the same sum", r"^every device ends with the same sum: (\w+)$", None, 0),
        ("the strategy's all-reduce equals the ring by hand",
         r"^MirroredStrategy's all-reduce equals the ring by hand to float32 precision: (\w+)$", None, 0),
        ("bytes sent and latencies of a ring and a tree", r"^\s*(\d+)\s+(\d\.\d{6})\s+(\d+)\s+(\d+)$", None, 0),
        ("transports and replica counts timed, in order",
         r"^(.+?), (\d+) replicas: alpha [\d.]+ us, bandwidth [\d.]+ GB/s \(fit error \d+%\)$", None, 0),
        ("training FLOPs per sample", r"^([\d,]+) training FLOPs per sample;", None, 0),
        ("the batch of the measured steps", r"^one device: [\d.]+ ms per step at a batch of (\d+)$", None, 0),
        ("published links",
         r"^(PCIe 4\.0 x16|NVLink 4 \(H100\)|100 Gb/s Ethernet|InfiniBand NDR)\s+([\d.]+)\s+([\d.]+)\s+(\S.*)$",
         None, 0),
        ("the hardware model's steps", r"^(model, NVIDIA H100 SXM, .+)$", None, 0),
        ("the rate of each MLP's step in the model", r"^  (this MLP|an MLP 10x as wide): (.+)$", None, 0),
        ("the latency term's share of each all-reduce in the model",
         r"^\s*(this MLP|an MLP 10x as wide),\s+(.+?),\s+(\d+) GPUs: all-reduce ([\d.]+) ms, (\d+)% of it latency$",
         None, 0),
        ("gradient accumulation in the model",
         r"^micro-batch (\d+), +(\d+) per all-reduce \(a batch of +(\d+) per GPU\): step +([\d.]+) ms, "
         r"speed-up +([\d.]+)x on 64 GPUs \(model\)$", None, 0),
        ("a flat ring against a two-level all-reduce",
         r"^wide MLP, 64 GPUs, +(.+?): all-reduce ([\d.]+) ms, speed-up ([\d.]+)x \(model\)$", None, 0),
        ("ZeRO's stages: bytes per parameter and traffic",
         r"^\s*([0-3])\s+(none \(data parallel\)|Adam's moments.*?)\s+([\d.]+)\s+([\d.]+)\s+([\d.]+)\s+([\d.]+)$",
         None, 0),
        ("what the sharded step all-gathers", r"^its all-gathers of (kernels|other tensors): (.+)$", None, 0),
        ("each kernel gathered once", r"^each kernel gathered once, for forward and backward alike: (\w+)$", None, 0),
        ("activation memory against the batch",
         r"^\s*(\d+)\s+(\d+\.\d\d)\s+(\d+\.\d\d)\s+(\d+\.\d\d)\s+(\d+\.\d\d)$", None, 0),
        ("matrix products, plain and checkpointed",
         r"^(the MLP|4 wide blocks): (\d+) matrix products per compiled step, (\d+) checkpointed$", None, 0),
        ("speed-ups modelled from specifications",
         r"^\s*(NVLink 4 \(H100\)|InfiniBand NDR),\s+(.+?):\s+([\d.]+)x on (\d+) GPUs$", None, 0),
        ("bytes per device, replicated and sharded (GB)",
         r"^(weights|gradients|optimizer \(Adam's 2 moments\)|float32 master weights|total)"
         r"\s+([\d.]+)\s+([\d.]+)\s+([\d.]+)\s+([\d.]+)$", None, 0),
        ("each layout's bytes on device 0 and collectives",
         r"^\s*((?:sharded )?data parallel|tensor parallel): +([\d,]+) bytes on device 0; collectives: (.+)$", None, 0),
        ("the sharded step's gradients",
         r"^the sharded step reduce-scatters its gradients: (\w+) ; it all-reduces them whole: (\w+)$", None, 0),
        ("sharded over replicated bytes", r"^sharded over replicated bytes: ([\d.]+)$", None, 0),
        ("pipeline bubble", r"^4 stages, +(\d+) micro-batches: bubble (\d+)%$", None, 0),
        ("what tensor parallelism communicates", r"^\s*tensor parallel\s+.*activations inside each layer \((.+)\)",
         None, 0),
    ],
}


def printed(notebook):
    """Everything a notebook printed to stdout, in order, with R's TRUE/FALSE written as Python's."""
    with open(notebook) as stream:
        cells = json.load(stream)["cells"]
    text = "".join("".join(output["text"]) for cell in cells if cell["cell_type"] == "code"
                   for output in cell.get("outputs", []) if output.get("name") == "stdout")
    text = re.sub(r"[ \t]+$", "", text, flags=re.MULTILINE)  # R's cat() leaves a space before "\n"
    return re.sub(r"\b(TRUE|FALSE)\b", lambda match: match.group(1).capitalize(), text)


def found(pattern, text):
    """Every group of every match of ``pattern`` in ``text``, in order."""
    groups = []
    for match in re.finditer(pattern, text, flags=re.MULTILINE):
        groups.extend(value.strip() for value in match.groups() if value is not None)
    return groups


@pytest.mark.parametrize("lesson", sorted(KEY_NUMBERS))
def test_twin_prints_the_key_numbers_of_its_python_lesson(lesson):
    python_text = printed(NOTEBOOKS / f"{lesson}.ipynb")
    r_text = printed(NOTEBOOKS / f"{lesson}_R.ipynb")
    if not r_text.strip():
        pytest.fail(f"{lesson}_R.ipynb stores no outputs; run: bash scripts/run_notebooks.sh --r-twins")
    for what, python_pattern, r_pattern, tolerance in KEY_NUMBERS[lesson]:
        python_values = found(python_pattern, python_text)
        r_values = found(r_pattern or python_pattern, r_text)
        assert python_values, f"{lesson}.ipynb no longer prints {what!r} (pattern {python_pattern!r})"
        mismatch = f"{what}: R twin {r_values}, Python lesson {python_values}"
        assert len(r_values) == len(python_values), mismatch
        for r_value, python_value in zip(r_values, python_values):
            if not re.fullmatch(NUMBER, python_value):
                assert r_value == python_value, mismatch
            else:
                assert abs(float(r_value) - float(python_value)) <= tolerance, (
                    f"{mismatch} (tolerance {tolerance})"
                )


def keras3_missing():
    """Why Rscript cannot run a keras3 script here, or None when it can."""
    if RSCRIPT is None:
        return "R is not installed"
    script = 'quit(status = !all(sapply(c("keras3", "tfdatasets"), requireNamespace, quietly = TRUE)))'
    if subprocess.run([RSCRIPT, "-e", script], capture_output=True, timeout=120).returncode:
        return "the R packages keras3 and tfdatasets are not installed"
    return None


def lesson5_worker_script():
    """The worker script that lesson 5's R twin writes with %%writefile."""
    with open(NOTEBOOKS / "05_multi_worker_R.ipynb") as stream:
        cells = json.load(stream)["cells"]
    sources = ["".join(cell["source"]) for cell in cells if cell["cell_type"] == "code"]
    return next(s for s in sources if s.startswith("%%writefile")).split("\n", 1)[1]


@pytest.mark.slow
@pytest.mark.xdist_group("training")
def test_lesson5_worker_script_trains_two_workers_with_rscript(tmp_path):
    reason = keras3_missing()
    if reason:
        pytest.skip(f"{reason}; the worker script needs keras3 in Rscript")
    script = tmp_path / "fit_then_loop.R"
    script.write_text(lesson5_worker_script())
    local_cluster = cluster.local_cluster(2)
    workers, logs = [], []
    for index in range(2):
        environment = dict(os.environ, TF_CONFIG=cluster.tf_config(local_cluster, "worker", index),
                           RETICULATE_PYTHON=sys.executable, KERASDIST_DATA="sample")
        logs.append((tmp_path / f"worker-{index}.log").open("w"))
        workers.append(subprocess.Popen([RSCRIPT, str(script)], stdout=logs[-1], stderr=subprocess.STDOUT,
                                        env=environment, cwd=tmp_path))
    deadline = time.monotonic() + 300
    try:
        for worker in workers:
            worker.wait(timeout=max(1.0, deadline - time.monotonic()))
    except subprocess.TimeoutExpired:
        pass
    finally:
        for worker, log in zip(workers, logs):
            if worker.poll() is None:
                worker.kill()
                worker.wait(timeout=30)
            log.close()
    outputs = [(tmp_path / f"worker-{index}.log").read_text() for index in range(2)]
    steps = len(load_mnist("sample", verbose=False).y_train) // 64  # whole global batches of 64
    for index, (worker, output) in enumerate(zip(workers, outputs)):
        assert worker.returncode == 0, (
            f"worker {index} ended with status {worker.returncode}:\n{output[-3000:]}"
        )
        assert f"worker {index}: fit() failed: ValueError: Attempt to convert a value (PerReplica" in output
        assert f"worker {index}: custom loop trained {steps} steps" in output
    digests = {re.search(r"weights sha256 (\w+)", output).group(1) for output in outputs}
    assert len(digests) == 1, f"the workers ended with different weights: {digests}"
