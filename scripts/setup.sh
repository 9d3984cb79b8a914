#!/usr/bin/env bash
# Set up everything kerasdist needs, idempotently: Debian's R and Fashion-MNIST (when root and missing),
# a virtualenv in .venv with the package and its extras, and the R package in .Rlib.
#
#   bash scripts/setup.sh              TensorFlow + the test, R and JAX extras (make setup, make demo)
#   bash scripts/setup.sh lab          + the notebooks extra (JupyterLab; make lab)
#   bash scripts/setup.sh site         + the docs extra (Sphinx, MyST-NB, the book theme; make site)
#   bash scripts/setup.sh test         + the notebooks and docs extras and, as root, Debian's chromium and Slurm (make test)
#   bash scripts/setup.sh --dry-run    print which TensorFlow build would be installed; change nothing
#
# TensorFlow build: the GPU build (tensorflow[and-cuda], the `gpu` extra) when an NVIDIA driver
# answers (`nvidia-smi -L` lists a GPU), else the CPU build (`cpu` extra). KERASDIST_TF=cpu|gpu
# overrides. Switching uninstalls the other build first; .venv/.installed records what is installed,
# so a rerun with nothing changed installs nothing.
#
# Versions for this machine (one line, "Dependencies: ..."), as pip constraints in .venv/constraints.txt:
# NumPy 1 (numpy<2, ml-dtypes<0.6, mlxtend<0.24) only where R's reticulate is older than 1.38
# (it rejects NumPy 2) and Python has NumPy 1.26 wheels (3.12 or older); rpy2 3.5 for R < 4.5, 3.6
# for R >= 4.5. rpy2 builds from source: as root, set-up installs the Python headers it needs.
# JAX (the `jax` extra, lesson 07's backend) is 0.6.x everywhere: it takes NumPy 1.26 (JAX 0.7.2 and
# later require NumPy 2) and has wheels for Python 3.13 with NumPy 2 as well.
set -euo pipefail
cd "$(dirname "$0")/.."

PYTHON=${PYTHON:-python3}
DEBIAN_PACKAGES="r-base-core r-base-dev r-cran-reticulate r-cran-testthat r-cran-withr r-cran-jsonlite r-cran-processx r-cran-rlang r-cran-cli r-cran-roxygen2"
DEBIAN_PACKAGES="$DEBIAN_PACKAGES dataset-fashion-mnist"  # --data fashion offline (lesson 08, the benchmark)
STAMP=.venv/.installed
CONSTRAINTS=.venv/constraints.txt

purpose=demo
dry_run=""
for arg in "$@"; do
    case "$arg" in
        --dry-run) dry_run=1 ;;
        demo|lab|site|test) purpose=$arg ;;
        *) echo "kerasdist: error: unknown set-up argument. Received: $arg; use lab, site, test or --dry-run" >&2; exit 2 ;;
    esac
done

# Sets TF_BUILD (cpu|gpu) and TF_REASON; a bad KERASDIST_TF is a one-line error (exit 2).
choose_tensorflow() {
    case "${KERASDIST_TF:-auto}" in
        cpu|gpu) TF_BUILD=$KERASDIST_TF; TF_REASON="KERASDIST_TF=$KERASDIST_TF" ;;
        auto)
            local gpus
            if gpus=$(timeout 20 nvidia-smi -L 2>/dev/null) && [ -n "$gpus" ]; then
                TF_BUILD=gpu; TF_REASON="nvidia-smi lists: $(echo "$gpus" | head -1)"
            else
                TF_BUILD=cpu; TF_REASON="no NVIDIA driver answered (nvidia-smi -L)"
            fi ;;
        *)
            echo "kerasdist: error: KERASDIST_TF must be cpu or gpu. Received: KERASDIST_TF=$KERASDIST_TF;" \
                 "unset it to choose by nvidia-smi" >&2
            exit 2 ;;
    esac
}

# The distributions of the TensorFlow build we are NOT installing that .venv holds now.
other_build_installed() {
    [ -x .venv/bin/python ] || return 0
    .venv/bin/python - "$TF_BUILD" <<'PY'
import sys
from importlib import metadata
names = [d.metadata["Name"].lower().replace("_", "-") for d in metadata.distributions()]
if sys.argv[1] == "gpu":
    other = [n for n in names if n == "tensorflow-cpu"]
else:  # the GPU build: tensorflow itself and the CUDA wheels its and-cuda extra pulls in
    other = [n for n in names if n == "tensorflow" or (n.startswith("nvidia-") and n.endswith("-cu12"))]
print(" ".join(sorted(other)))
PY
}

# The version of Debian package $1, as x.y[.z] ("1.28-1" -> 1.28), or nothing.
debian_version() {
    dpkg-query -W -f='${Status} ${Version}' "$1" 2>/dev/null | awk '/ok installed/ { sub(/^[0-9]+:/, "", $4); sub(/[-+~].*/, "", $4); print $4 }'
}

# Whether version $1 is older than $2.
older_than() {
    [ "$1" != "$2" ] && [ "$(printf '%s\n%s\n' "$1" "$2" | sort -V | head -1)" = "$1" ]
}

# Sets PINS (pip constraints, one a line) and DEPENDENCIES (a line saying which and why) from this
# machine's Python, R and reticulate.
choose_versions() {
    local python_version r_version reticulate_version reason pins=()
    python_version=$("$PYTHON" -c 'import sys; print("%d.%d" % sys.version_info[:2])')
    r_version=$(debian_version r-base-core)
    reticulate_version=$(debian_version r-cran-reticulate)
    if command -v Rscript >/dev/null; then
        read -r r_version reticulate_version < <(timeout 60 Rscript -e 'cat(as.character(getRversion()),
            tryCatch(as.character(packageVersion("reticulate")), error = function(e) ""), "\n")' 2>/dev/null \
            || echo "$r_version $reticulate_version")
    fi
    reason="Python $python_version, R ${r_version:-none}, reticulate ${reticulate_version:-none}"
    if [ -n "$reticulate_version" ] && older_than "$reticulate_version" 1.38; then
        if older_than "$python_version" 3.13; then
            pins+=("numpy<2" "ml-dtypes<0.6" "mlxtend<0.24")
            reason="$reason: reticulate < 1.38 rejects NumPy 2"
        else
            reason="$reason: no NumPy 1 wheels for Python $python_version; R needs reticulate >= 1.38 for NumPy 2"
        fi
    fi
    if [ -n "$r_version" ] && older_than "$r_version" 4.5; then
        pins+=("rpy2==3.5.*")
    elif [ -n "$r_version" ]; then
        pins+=("rpy2>=3.6,<3.7")
    fi
    PINS=$(printf '%s\n' "${pins[@]}")
    DEPENDENCIES="Dependencies: ${pins[*]:-no pins} ($reason)"
}

# The Debian package with the headers rpy2 builds against, when $PYTHON lacks them.
python_headers_package() {
    "$PYTHON" - <<'PY'
import os, sys, sysconfig
if not os.path.exists(os.path.join(sysconfig.get_paths()["include"], "Python.h")):
    print("libpython%d.%d-dev" % sys.version_info[:2])
PY
}

choose_tensorflow
extras="$TF_BUILD test r jax"
case "$purpose" in
    lab) extras="$extras notebooks" ;;
    site) extras="$extras docs" ;;
    test) extras="$extras notebooks docs" ;;
esac
if [ -n "$dry_run" ]; then
    echo "TensorFlow build: $TF_BUILD ($TF_REASON)"
    echo "would install: .[$(echo "$extras" | tr ' ' ,)]"
    choose_versions
    echo "$DEPENDENCIES"
    remove=$(other_build_installed)
    [ -z "$remove" ] || echo "would first uninstall: $remove"
    exit 0
fi

# make test also needs Debian's chromium (the JupyterLab browser test) and Slurm with munge
# (tests/test_slurm.py runs real jobs on a single-node Slurm it starts on 127.0.0.1).
[ "$purpose" = test ] && DEBIAN_PACKAGES="$DEBIAN_PACKAGES chromium slurm-wlm munge"
DEBIAN_PACKAGES="$DEBIAN_PACKAGES $(python_headers_package)"
missing=""
if command -v dpkg-query >/dev/null; then
    for package in $DEBIAN_PACKAGES; do
        dpkg-query -W -f='${Status}' "$package" 2>/dev/null | grep -q "ok installed" || missing="$missing $package"
    done
fi
if [ -n "$missing" ]; then
    if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null; then
        echo "Installing Debian packages:$missing"
        apt-get update -qq
        DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends $missing >/dev/null
    else
        echo "Note: the R parts (rpy2 builds against the Python headers), --data fashion offline, the Slurm test and the browser test need these Debian packages (run as root or with sudo):$missing" >&2
    fi
fi

if [ ! -x .venv/bin/python ]; then
    "$PYTHON" -m venv .venv
fi
# Reinstall when an extra is not in the stamp yet, the constraints or pyproject.toml changed, or a
# package went missing.
choose_versions
needed=""
[ "$PINS" = "$(cat "$CONSTRAINTS" 2>/dev/null)" ] || needed=1
for extra in $extras; do
    grep -qw "$extra" "$STAMP" 2>/dev/null || needed=1
done
if [ -n "$needed" ] || [ pyproject.toml -nt "$STAMP" ] || ! .venv/bin/python -c \
        "import importlib.util as u, sys; sys.exit(any(u.find_spec(m) is None for m in ('kerasdist', 'nbval', 'rpy2', 'tensorflow', 'jax')))"; then
    echo "TensorFlow build: $TF_BUILD ($TF_REASON)"
    echo "$DEPENDENCIES"
    remove=$(other_build_installed)
    if [ -n "$remove" ]; then
        echo "Uninstalling the other TensorFlow build first: $remove"
        .venv/bin/pip uninstall -q -y $remove
    fi
    # Keep the extras installed before (a later `make setup` must not drop the notebooks extra).
    kept=$(tr ' ' '\n' 2>/dev/null < "$STAMP" | grep -vxE 'cpu|gpu' || true)
    extras=$(echo $extras $kept | tr ' ' '\n' | awk 'NF && !seen[$0]++' | tr '\n' ' ')
    .venv/bin/pip install -q --upgrade pip
    echo "$PINS" > "$CONSTRAINTS.new"
    .venv/bin/pip install -q -c "$CONSTRAINTS.new" -e ".[$(echo $extras | tr ' ' ,)]"
    mv "$CONSTRAINTS.new" "$CONSTRAINTS"
    echo "$extras" > "$STAMP"
fi

# The kerasdist R package, in a project-local library (.Rlib) that lessons and R users can add to .libPaths().
if command -v R >/dev/null; then
    mkdir -p .Rlib
    if [ ! -f .Rlib/kerasdist/DESCRIPTION ] || [ -n "$(find r -newer .Rlib/kerasdist/DESCRIPTION -type f | head -1)" ]; then
        R CMD INSTALL --no-test-load -l .Rlib r >/dev/null
    fi
fi
