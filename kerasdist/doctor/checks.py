"""The doctor's checks of this machine: Python, TensorFlow, GPUs, R and its packages, rpy2, the probes' rows.

Every check is one row: OK, missing or broken, what was found, who needs it,
and for a problem the one command that fixes it. R and rpy2's embedded R are
asked in subprocesses with a timeout.
"""

import dataclasses
import json
import os
import platform
import shutil
import subprocess
import sys
from importlib import metadata

from kerasdist import data
from kerasdist.course import lesson_needs
from kerasdist.engines import choice as engines

OK, MISSING, BROKEN = "OK", "missing", "broken"
PROJECT_ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
COLLECTIVES = "JAX multi-process collectives"
R_PACKAGES = ("reticulate", "keras3", "tfdatasets", "tensorflow", "kerasdist")
INSTALL_R_TWIN_PACKAGES = """Rscript -e 'install.packages(c("keras3", "tfdatasets", "tensorflow"))'"""
INSTALL_R = "sudo apt-get install --no-install-recommends r-base-core r-cran-reticulate"
INSTALL_GPU_BUILD = "KERASDIST_TF=gpu make setup"
PROBE_NEEDED_BY = {
    "multi_worker_fit": "05, kerasdist launch/worker",
    "mirrored_steps_per_execution": "speed tips of 01 and 04",
    "central_storage_metrics": "06_strategy_map",
}


@dataclasses.dataclass
class Check:
    """One row of the doctor's table.

    ``required`` is False for parts only a GPU workstation needs: missing, they
    are reported but not counted as problems. ``upstream`` marks a probe of a
    Keras bug: broken there means "kerasdist picks the engine that avoids it".
    """

    key: str
    name: str
    status: str
    found: str
    needed_by: str
    fix: str = ""
    required: bool = True
    upstream: bool = False

    @property
    def is_problem(self):
        """A problem of this machine (upstream bugs are worked around, not fixed here)."""
        return not self.upstream and (self.status == BROKEN or (self.status == MISSING and self.required))


# ---- Python, TensorFlow, GPUs ----

def _version(distribution):
    try:
        return metadata.version(distribution)
    except metadata.PackageNotFoundError:
        return None


def python_checks():
    import keras
    import numpy
    import tensorflow as tf

    python = platform.python_version()
    supported = (3, 10) <= sys.version_info[:2] <= (3, 13)
    installed = engines.versions()
    both = "tensorflow" in installed and "tensorflow-cpu" in installed
    build = "GPU build" if tf.test.is_built_with_cuda() else "CPU build"
    distribution = "tensorflow-cpu" if "tensorflow-cpu" in installed else "tensorflow"
    tensorflow_found = f"{tf.__version__}, {build} ({distribution})"
    if both:
        tensorflow_found = f"{tf.__version__}: tensorflow AND tensorflow-cpu installed"
    numpy_major = int(numpy.__version__.split(".")[0])
    return [
        Check("python", "Python", OK if supported else BROKEN, python, "all lessons (3.10-3.13)",
              "" if supported else "python3.13 -m venv .venv && make setup"),
        Check("tensorflow", "TensorFlow", BROKEN if both else OK, tensorflow_found, "all lessons (2.21)",
              "make setup" if both else ""),
        Check("keras", "Keras", OK, keras.__version__, "all lessons (3.15+)"),
        Check("numpy", "NumPy", OK, numpy.__version__ + (" (NumPy 2)" if numpy_major >= 2 else ""),
              "all lessons"),
        _fashion_check(),
    ]


def jax_checks(timeout_s=60):
    """The JAX engine: JAX's version and devices, and whether 2 local processes can all-reduce.

    Both run in subprocesses (JAX fixes its devices when it starts), bounded by ``timeout_s``.
    """
    version = _version("jax")
    needed_by = lesson_needs.lessons_needing("jax") + ", --backend jax"
    if not version:
        missing = "make setup (the jax extra)"
        return [Check("jax", "JAX", MISSING, "not installed", needed_by, missing),
                Check("jax_collectives", COLLECTIVES, MISSING, "no JAX", needed_by, missing)]
    code = "import jax, json; print(json.dumps([str(device) for device in jax.devices()]))"
    try:
        listed = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                                timeout=timeout_s)
        devices = json.loads(listed.stdout.strip().splitlines()[-1])
        found = f"{version}: {len(devices)} device(s), {', '.join(devices)}"
        status = OK
    except (subprocess.TimeoutExpired, ValueError, IndexError):
        found, status = f"{version}: listing its devices failed", BROKEN
    return [Check("jax", "JAX", status, found, needed_by, "" if status == OK else "make setup"),
            _jax_collectives_check(needed_by, timeout_s)]


def _jax_collectives_check(needed_by, timeout_s):
    from kerasdist.cluster.ports import free_ports

    coordinator = f"127.0.0.1:{free_ports(1)[0]}"
    environment = {name: value for name, value in os.environ.items() if name != "XLA_FLAGS"}
    commands = [[sys.executable, "-m", "kerasdist.engines.jax_engine", "gather", coordinator, "2", str(index)]
                for index in range(2)]
    processes = [subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                                  env=environment) for command in commands]
    outputs = []
    try:
        for process in processes:
            outputs.append(process.communicate(timeout=timeout_s))
    except subprocess.TimeoutExpired:
        late = f"2 local processes did not finish in {timeout_s:g} s"
        return Check("jax_collectives", COLLECTIVES, BROKEN, late, needed_by, "kerasdist doctor --json")
    finally:
        for process in processes:
            if process.poll() is None:
                process.kill()
                process.wait()
    if all(process.returncode == 0 and '"sum": 1' in stdout
           for process, (stdout, _) in zip(processes, outputs)):
        return Check("jax_collectives", COLLECTIVES, OK,
                     "2 local processes gathered over gloo", needed_by)
    failed = next((stderr for process, (_, stderr) in zip(processes, outputs) if process.returncode), "")
    last = (failed.strip().splitlines() or ["no answer"])[-1][:160]
    return Check("jax_collectives", COLLECTIVES, BROKEN, last, needed_by,
                 "kerasdist doctor --json (then see the JAX error)")


def _fashion_check():
    """Where Fashion-MNIST would come from, without linking or downloading anything."""
    places = [data.fashion_paths(name) for name in data.FASHION_FILES]
    if all(os.path.exists(cached) for cached, _ in places):
        found = "in the Keras cache"
    elif all(os.path.isfile(packaged) for _, packaged in places):
        found = f"Debian's {data.FASHION_DEBIAN_PACKAGE} package"
    else:
        found = ""
    return Check("fashion_mnist", "Fashion-MNIST (--data fashion)", OK if found else MISSING,
                 found or "not on this machine (a download needs the network)",
                 lesson_needs.lessons_needing("fashion_mnist") + ", --data fashion",
                 "" if found else f"sudo apt-get install {data.FASHION_DEBIAN_PACKAGE}")


def _nvidia_gpus():
    """``[(name, memory MiB)]`` from nvidia-smi, or None when there is no working NVIDIA driver."""
    if shutil.which("nvidia-smi") is None:
        return None
    try:
        query = ["nvidia-smi", "--query-gpu=name,memory.total", "--format=csv,noheader,nounits"]
        done = subprocess.run(query, capture_output=True, text=True, timeout=15)
    except (OSError, subprocess.TimeoutExpired):
        return None
    if done.returncode:
        return None
    gpus = []
    for line in done.stdout.strip().splitlines():
        name, _, memory = line.rpartition(",")
        gpus.append((name.strip(), int(memory) if memory.strip().isdigit() else None))
    return gpus


def gpu_checks():
    import tensorflow as tf

    driver_gpus = _nvidia_gpus()
    tf_gpus = tf.config.list_physical_devices("GPU")
    info = tf.sysconfig.get_build_info()
    cuda_build = bool(info.get("is_cuda_build"))
    cores = os.cpu_count()
    optional = "optional: lessons use virtual CPU replicas"
    if driver_gpus is None and not tf_gpus:
        gpus = Check("gpus", "GPUs", MISSING, "none (no NVIDIA driver answers nvidia-smi)",
                     optional, required=False)
    elif not tf_gpus:
        gpus = Check("gpus", "GPUs", BROKEN,
                     f"nvidia-smi lists {len(driver_gpus)}, TensorFlow sees 0", "GPU speed in every lesson",
                     INSTALL_GPU_BUILD if not cuda_build else
                     '.venv/bin/pip install --force-reinstall "tensorflow[and-cuda]>=2.21,<2.22"')
    else:
        described = ", ".join(f"{name} ({memory} MiB)" if memory else name
                              for name, memory in driver_gpus or [])
        gpus = Check("gpus", "GPUs", OK, f"TensorFlow sees {len(tf_gpus)}: {described or 'no nvidia-smi'}",
                     "GPU speed in every lesson")
    if cuda_build:
        cuda = Check("cuda", "CUDA / cuDNN (TF build)", OK if tf_gpus else MISSING,
                     f"CUDA {info.get('cuda_version', '?')}, cuDNN {info.get('cudnn_version', '?')}",
                     "GPUs", required=bool(driver_gpus))
    else:
        cuda = Check("cuda", "CUDA / cuDNN (TF build)", MISSING, "none: CPU build of TensorFlow", "GPUs",
                     INSTALL_GPU_BUILD if driver_gpus else "", required=bool(driver_gpus))
    nccl = _version("nvidia-nccl-cu12")
    several = len(tf_gpus) > 1
    nccl_check = Check("nccl", "NCCL", OK if nccl else MISSING,
                       f"nvidia-nccl-cu12 {nccl}" if nccl else "none",
                       "mirrored on several GPUs (all-reduce)",
                       ".venv/bin/pip install nvidia-nccl-cu12" if several and not nccl else "",
                       required=several)
    if len(tf_gpus) > 1:
        gpu_replicas = f"{len(tf_gpus)} (one per GPU)"
    elif tf_gpus:
        gpu_replicas = "any N logical (1 GPU split, 2 GiB each)"
    else:
        gpu_replicas = "0"
    replicas = Check("replicas", "Replicas per device kind", OK,
                     f"CPU: any N virtual ({cores} cores); GPU: {gpu_replicas}; workers: 1 each",
                     "the lessons' replicas")
    return [gpus, cuda, nccl_check, replicas]


# ---- R, its packages, rpy2 ----

def _r_library_code():
    """R code giving a named character vector: R's version and each of R_PACKAGES' version ("" if absent)."""
    library = os.path.join(PROJECT_ROOT, ".Rlib")
    prepend = f".libPaths(c({json.dumps(library)}, .libPaths())); " if os.path.isdir(library) else ""
    packages = ", ".join(json.dumps(name) for name in R_PACKAGES)
    return ("{ " + prepend + "c(R = paste(R.version$major, R.version$minor, sep = '.'), "
            f"sapply(c({packages}), function(p) tryCatch(as.character(utils::packageVersion(p)), "
            "error = function(e) ''))) }")


def r_packages_from_rscript():
    """``{"R": version, package: version or ""}`` from Rscript, or ``{"error": ...}``."""
    if shutil.which("Rscript") is None:
        return {"error": "R not found"}
    code = f"v <- {_r_library_code()}; cat(paste0(names(v), '=', v), sep = '\\n')"
    try:
        done = subprocess.run(["Rscript", "-e", code], capture_output=True, text=True, timeout=60)
    except subprocess.TimeoutExpired:
        return {"error": "Rscript hung (killed after 60 s)"}
    if done.returncode:
        return {"error": f"Rscript failed: {(done.stderr.strip().splitlines() or ['?'])[-1]}"}
    return dict(line.split("=", 1) for line in done.stdout.splitlines() if "=" in line)


def r_packages_from_rpy2():
    """The same as seen by R embedded in Python through rpy2, plus ``rpy2``'s version."""
    if _version("rpy2") is None:
        return {"error": "rpy2 not installed"}
    code = (
        "import json, os, rpy2\n"
        "from rpy2 import robjects\n"
        f"found = robjects.r({_r_library_code()!r})\n"
        "print(json.dumps({'rpy2': rpy2.__version__, **dict(zip(found.names, found))}), flush=True)\n"
        "os._exit(0)\n"
    )
    try:
        done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60,
                              start_new_session=True)
    except subprocess.TimeoutExpired:
        return {"error": "embedded R hung (killed after 60 s)"}
    try:
        return json.loads(done.stdout.strip().splitlines()[-1])
    except (IndexError, ValueError):
        return {"error": f"embedding R failed: {(done.stderr.strip().splitlines() or ['?'])[-1][:120]}"}


def _version_tuple(text):
    return tuple(int(part) for part in text.split(".")[:3] if part.isdigit())


def r_checks(found, embedded):
    r_ok = "error" not in found
    r_twins = f"keras3 R twins of {lesson_needs.lessons_needing('keras3')}"
    checks = [Check("r", "R", OK if r_ok else MISSING, found.get("R") or found["error"], "all _R notebooks",
                    "" if r_ok else INSTALL_R)]
    reticulate = found.get("reticulate", "")
    checks.append(Check(
        "reticulate", "reticulate (R)", OK if reticulate else MISSING,
        (reticulate + (" (keras3 needs >= 1.42)" if _version_tuple(reticulate) < (1, 42) else ""))
        or "not installed",
        "R package, _R notebooks (>= 1.28)", "" if reticulate else INSTALL_R))
    for key, package, needed_by, fix in (
        ("kerasdist_r", "kerasdist", "00_R_with_reticulate_R, R users", "make setup"),
        ("keras3", "keras3", r_twins, INSTALL_R_TWIN_PACKAGES),
        ("tfdatasets", "tfdatasets", r_twins, INSTALL_R_TWIN_PACKAGES),
        ("tensorflow_r", "tensorflow", r_twins, INSTALL_R_TWIN_PACKAGES),
    ):
        version = found.get(package, "")
        checks.append(Check(key, f"{package} (R)", OK if version else MISSING, version or "not installed",
                            needed_by, "" if version else fix))
    checks.append(rpy2_check(found, embedded))
    checks.append(numpy_reticulate_check(reticulate))
    return checks


def rpy2_check(found, embedded):
    # rpy2 3.6 fails against R older than 4.5; 3.5 is the one for those (as scripts/setup.sh picks).
    wanted = "rpy2==3.5.*" if _version_tuple(found.get("R") or "0") < (4, 5) else "rpy2>=3.6,<3.7"
    fix = f'.venv/bin/pip install --force-reinstall --no-cache-dir "{wanted}"'
    if "error" in embedded:
        return Check("rpy2", "rpy2 (embedded R)", MISSING if "not installed" in embedded["error"] else BROKEN,
                     embedded["error"], "all _R notebooks (%%R cells)", fix)
    seen = [name for name in R_PACKAGES if embedded.get(name)]
    lost = [name for name in R_PACKAGES if found.get(name) and not embedded.get(name)]
    text = f"{embedded['rpy2']}, R {embedded.get('R')} finds {', '.join(seen) or 'no kerasdist packages'}"
    if lost:
        return Check("rpy2", "rpy2 (embedded R)", BROKEN, f"{text}; not {', '.join(lost)} (Rscript does)",
                     "all _R notebooks (%%R cells)", fix)
    return Check("rpy2", "rpy2 (embedded R)", OK, text, "all _R notebooks (%%R cells)")


def numpy_reticulate_check(reticulate):
    import numpy

    name, needed_by = "NumPy vs reticulate", "R package, _R notebooks"
    if not reticulate:
        return Check("numpy_reticulate", name, MISSING, "no reticulate", needed_by, INSTALL_R)
    numpy_2 = int(numpy.__version__.split(".")[0]) >= 2
    if numpy_2 and _version_tuple(reticulate) < (1, 38):
        return Check("numpy_reticulate", name, BROKEN,
                     f"NumPy {numpy.__version__} with reticulate {reticulate} (< 1.38 rejects NumPy 2)",
                     needed_by, '.venv/bin/pip install "numpy<2"')
    return Check("numpy_reticulate", name, OK, f"NumPy {numpy.__version__} with reticulate {reticulate}",
                 needed_by)


# ---- Probes of upstream bugs ----

def probe_check(probe, answer):
    engine, _ = engines.engine_for(probe.strategy, {probe.name: answer})
    return Check(probe.name, probe.title, BROKEN if answer["bug_present"] else OK,
                 f"engine {engine}: {answer['detail']}", f"{PROBE_NEEDED_BY[probe.name]} ({probe.issue})",
                 probe.advice if answer["bug_present"] else "", upstream=True)
