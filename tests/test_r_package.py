"""The R package in r/: its testthat suite, R CMD check, and driving it from R in Python.

The package is the one set-up installed into .Rlib (scripts/setup.sh reinstalls it whenever r/
changes). Every R process here is a subprocess, so nothing touches TensorFlow in the pytest
process: replicas must be made before TensorFlow starts its devices, and other tests own this process.
"""

import json
import os
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
R_PACKAGE = ROOT / "r"
RSCRIPT = shutil.which("Rscript")
R = shutil.which("R")
TIMEOUT_S = 600
# The testthat files that train models: the full tier runs them, make check the others.
TRAINING_TEST_FILES = ("compare", "train", "validation")

pytestmark = pytest.mark.skipif(
    RSCRIPT is None or R is None,
    reason="R is not installed (Debian: apt-get install --no-install-recommends r-base-core "
           "r-cran-reticulate r-cran-testthat r-cran-withr; scripts/setup.sh does this as root)",
)


def r_environment(library, **extra):
    """The environment for R subprocesses: the temporary library first, this Python for reticulate."""
    env = dict(os.environ)
    libraries = [str(library)] + ([env["R_LIBS"]] if env.get("R_LIBS") else [])
    env.update(
        R_LIBS=os.pathsep.join(libraries),
        RETICULATE_PYTHON=sys.executable,
        # A missing Python side fails the R tests instead of skipping them.
        KERASDIST_TEST_REQUIRE_PYTHON="true",
        TF_CPP_MIN_LOG_LEVEL="2",
    )
    env.update(extra)
    return env


def run(command, **kwargs):
    """Run a command, returning the CompletedProcess with stdout and stderr merged as text."""
    return subprocess.run(command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                          timeout=TIMEOUT_S, **kwargs)


@pytest.fixture(scope="session")
def r_library():
    """The library set-up installed the R package into (.Rlib), checked to be newer than r/."""
    library = ROOT / ".Rlib"
    installed = library / "kerasdist" / "DESCRIPTION"
    sources = [path for path in R_PACKAGE.rglob("*") if path.is_file()]
    if not installed.is_file() or any(path.stat().st_mtime > installed.stat().st_mtime for path in sources):
        pytest.fail(f"the R package in {library.name} is missing or older than r/: run bash scripts/setup.sh "
                    "(make check and make test do)")
    return library


def r_test_files(training):
    """The testthat files (names without test- and .R) that train models, or the others."""
    names = [path.stem.removeprefix("test-") for path in (R_PACKAGE / "tests" / "testthat").glob("test-*.R")]
    return sorted(name for name in names if (name in TRAINING_TEST_FILES) == training)


@pytest.mark.parametrize("training", [
    pytest.param(False, id="without-training", marks=pytest.mark.slow),  # an R session (about 25 s): make test
    pytest.param(True, id="training", marks=[pytest.mark.slow, pytest.mark.xdist_group("training")]),
])
def test_testthat_suite_passes_with_rscript(r_library, tmp_path, training):
    # A copy of the tests, so that testthat writes nothing into the source tree.
    tests = tmp_path / "testthat"
    shutil.copytree(R_PACKAGE / "tests" / "testthat", tests)
    files = r_test_files(training)
    script = textwrap.dedent(f"""
        results <- as.data.frame(testthat::test_dir(
          {json.dumps(str(tests))}, package = "kerasdist", load_package = "installed",
          filter = {json.dumps("^(" + "|".join(files) + ")$")},
          reporter = "summary", stop_on_failure = FALSE
        ))
        for (test in results$test[results$skipped]) cat("SKIPPED:", test, "\\n")
        cat(sprintf("KD_TESTTHAT tests=%d expectations=%d failed=%d errors=%d skipped=%d seconds=%.1f\\n",
                    nrow(results), sum(results$nb), sum(results$failed), sum(results$error),
                    sum(results$skipped), sum(results$real)))
        cat("KD_TESTTHAT_FILES", sort(unique(results$file)), "\\n")
        quit(status = if (sum(results$failed) + sum(results$error) > 0) 1L else 0L)
    """)
    result = run([RSCRIPT, "-e", script], cwd=tmp_path, env=r_environment(r_library))
    print(result.stdout)
    assert result.returncode == 0, result.stdout
    summary = next(line for line in result.stdout.splitlines() if line.startswith("KD_TESTTHAT "))
    counts = dict(field.split("=") for field in summary.split()[1:])
    ran = next(line for line in result.stdout.splitlines() if line.startswith("KD_TESTTHAT_FILES")).split()[1:]
    assert ran == [f"test-{name}.R" for name in files]
    assert int(counts["failed"]) == 0 and int(counts["errors"]) == 0


def test_base_plot_legend_names_the_series_that_coincide(r_library, tmp_path):
    # The base-graphics plot (lesson 00) finds from the values which series hide another: "b" lies on "a"
    # (1e-6 apart), "d" has a's values, "c" is 0.1 off at one point and is drawn as a series of its own.
    script = textwrap.dedent("""
        suppressPackageStartupMessages(library(kerasdist))
        points <- data.frame(series = rep(c("a", "b", "c", "d"), each = 3L), x = rep(1:3, 4L),
                             y = c(2, 1, 0.5, 2, 1, 0.5 + 1e-6, 2, 1.1, 0.5, 2, 1, 0.5), dashed = FALSE)
        matches <- kerasdist:::coinciding_series(points)
        cat(sprintf("KD_MATCH %s\\t%s\\t%d\\t%s\\n", matches$series, matches$leader, matches$rank,
                    kerasdist:::coinciding_notes(matches)), sep = "")
        # A whole comparison whose replicas are virtual CPUs (note under the throughput axis) draws.
        x <- data.frame(run = rep(c("fixed_global/1", "fixed_global/2"), each = 3L), mode = "fixed_global",
                        replicas = rep(1:2, each = 3L), global_batch_size = 64L, level = "step", index = 1:3,
                        metric = "batch_loss", value = c(2, 1, 0.5, 2, 1, 0.5), stringsAsFactors = FALSE)
        attr(x, "runs") <- data.frame(run = c("fixed_global/1", "fixed_global/2"), steady_samples_per_s = c(4000, 1200))
        attr(x, "virtual_cpus") <- TRUE
        cat("KD_PNG", file.size(kd_plot_convergence(x, file = "comparison.png", backend = "base")) > 1000, "\\n")
    """)
    result = run([RSCRIPT, "-e", script], cwd=tmp_path, env=r_environment(r_library, LC_ALL="C.UTF-8"))
    assert result.returncode == 0, result.stdout
    matches = [line.split(" ", 1)[1].split("\t") for line in result.stdout.splitlines() if line.startswith("KD_MATCH")]
    assert matches == [["a", "NA", "0", "NA"], ["b", "a", "1", "  lies on a (max |\u0394| 1e-06)"],
                       ["c", "NA", "0", "NA"], ["d", "a", "2", "  same values as a"]]
    assert "KD_PNG TRUE" in result.stdout


def test_man_and_namespace_are_what_roxygen2_writes_from_the_sources(tmp_path):
    """man/*.Rd and NAMESPACE are generated: regenerate them in a copy and compare (rOpenSci's CI check)."""
    copy = tmp_path / "r"
    shutil.copytree(R_PACKAGE, copy)
    shutil.rmtree(copy / "man")
    (copy / "NAMESPACE").unlink()
    script = 'roxygen2::roxygenise(".", roclets = c("rd", "namespace"))'
    result = run([RSCRIPT, "-e", script], cwd=copy)
    if result.returncode and "there is no package called 'roxygen2'" in result.stdout:
        pytest.skip("roxygen2 is not installed (Debian: apt-get install r-cran-roxygen2; scripts/setup.sh does)")
    assert result.returncode == 0, result.stdout
    committed = {path.name: path.read_text() for path in (R_PACKAGE / "man").glob("*.Rd")}
    generated = {path.name: path.read_text() for path in (copy / "man").glob("*.Rd")}
    stale = sorted(name for name in committed.keys() | generated.keys() if committed.get(name) != generated.get(name))
    if (R_PACKAGE / "NAMESPACE").read_text() != (copy / "NAMESPACE").read_text():
        stale.append("NAMESPACE")
    assert not stale, (f"out of date with the roxygen comments in r/R: {', '.join(stale)}; run "
                       "Rscript -e 'roxygen2::roxygenise(\"r\")'")


@pytest.mark.slow
def test_r_cmd_check_has_no_errors_or_warnings(tmp_path):
    build = run([R, "CMD", "build", "--no-build-vignettes", "--no-manual", str(R_PACKAGE)], cwd=tmp_path)
    assert build.returncode == 0, build.stdout
    tarball = next(tmp_path.glob("kerasdist_*.tar.gz"))
    # The testthat suite runs in the tests above, against the same sources; --no-tests avoids a second run.
    # ggplot2 is optional (Suggests): check without it where it is not installed.
    check = run(
        [R, "CMD", "check", "--no-manual", "--no-build-vignettes", "--no-tests", tarball.name],
        cwd=tmp_path, env={**os.environ, "_R_CHECK_FORCE_SUGGESTS_": "false"},
    )
    print(check.stdout)
    status = [line for line in check.stdout.splitlines() if line.startswith("Status:")]
    assert check.returncode == 0, check.stdout
    assert status, check.stdout
    assert "ERROR" not in status[-1] and "WARNING" not in status[-1], check.stdout


EMBEDDED = textwrap.dedent("""
    import atexit
    import json
    import os
    import shutil
    import sys

    import rpy2.rinterface
    import rpy2.robjects as robjects

    values = robjects.r('''
      suppressPackageStartupMessages(library(kerasdist))
      kd_simulate_devices(2)
      checkpoints <- tempfile()
      first <- kd_train(replicas = 2, epochs = 2, data = "sample", checkpoint_dir = checkpoints, verbose = 0)
      more <- kd_train(replicas = 2, epochs = 3, data = "sample", checkpoint_dir = checkpoints, verbose = 0)
      python <- kd_python()
      list(
        first_is_data_frame = is.data.frame(first), first_rows = nrow(first),
        first_epochs = first$epoch, first_replicas = attr(first, "replicas"),
        more_rows = nrow(more), more_initial_epoch = attr(more, "initial_epoch"),
        more_epochs_run = attr(more, "epochs_run"),
        same_first_epochs = identical(more$loss[1:2], first$loss),
        python = python$python, chosen_by = python$chosen_by, r_tempdir = tempdir()
      )
    ''')
    record = {name: list(value) if len(value) > 1 else value[0] for name, value in zip(values.names, values)}

    # R drove this very process: TensorFlow here has the two replicas R asked for.
    import tensorflow as tf
    record["logical_cpus"] = len(tf.config.list_logical_devices("CPU"))
    record["sys_executable"] = sys.executable
    print("KD_EMBEDDED " + json.dumps(record, default=str), flush=True)

    # reticulate 1.28 under rpy2 3.5 can crash at interpreter exit: rpy2's exit hook ending R while R
    # finalizes Python objects ("PyThreadState_Get: ... GIL is released"), or rpy2's event handler
    # called during teardown (a segfault, about 1 run in 4). The work is done and printed by then:
    # remove R's session folder and leave without the interpreter's teardown.
    shutil.rmtree(record["r_tempdir"], ignore_errors=True)
    atexit.unregister(rpy2.rinterface.endr)
    sys.stdout.flush()
    os._exit(0)
""")


@pytest.mark.slow
@pytest.mark.xdist_group("training")
def test_kd_train_from_r_embedded_in_python_through_rpy2(r_library, tmp_path):
    # A fresh Python process: kd_simulate_devices(2) must run before TensorFlow starts its devices.
    env = r_environment(r_library, TMPDIR=str(tmp_path))
    for name in ("RETICULATE_PYTHON", "KERASDIST_PYTHON"):
        env.pop(name, None)  # reticulate must find the host interpreter by itself
    result = run([sys.executable, "-c", EMBEDDED], cwd=tmp_path, env=env)
    print(result.stdout)
    assert result.returncode == 0, result.stdout
    # rpy2's warning about reticulate may leave its indentation on the same line: search, not startswith.
    line = next(line for line in result.stdout.splitlines() if "KD_EMBEDDED " in line)
    record = json.loads(line.split("KD_EMBEDDED ", 1)[1])
    assert record["first_is_data_frame"] is True
    assert record["first_rows"] == 2
    assert record["first_epochs"] == [1, 2]
    assert record["first_replicas"] == 2
    # epochs = 3 with the same checkpoint folder trains only epoch 3.
    assert record["more_rows"] == 3
    assert record["more_initial_epoch"] == 2
    assert record["more_epochs_run"] == 1
    assert record["same_first_epochs"] is True
    assert record["logical_cpus"] == 2
    assert "embedded" in record["chosen_by"]
    assert os.path.samefile(record["python"], record["sys_executable"])
