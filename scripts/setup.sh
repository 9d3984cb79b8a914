#!/usr/bin/env bash
# Set up everything kerasdist needs, idempotently: Debian's R and Slurm (when root and missing),
# a virtualenv in .venv with the package and its test/R extras, and the R package in .Rlib.
set -euo pipefail
cd "$(dirname "$0")/.."

PYTHON=${PYTHON:-python3}
DEBIAN_PACKAGES="r-base-core r-base-dev r-cran-reticulate r-cran-testthat r-cran-withr r-cran-jsonlite"
# Slurm and munge: tests/test_slurm.py runs real jobs on a single-node Slurm it starts on 127.0.0.1.
DEBIAN_PACKAGES="$DEBIAN_PACKAGES slurm-wlm munge"

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
        echo "Note: the R parts and the Slurm test need these Debian packages (run as root or with sudo):$missing" >&2
    fi
fi

if [ ! -x .venv/bin/python ]; then
    "$PYTHON" -m venv .venv
fi
if ! .venv/bin/python -c "import kerasdist, nbval, rpy2" 2>/dev/null || [ pyproject.toml -nt .venv/.installed ]; then
    .venv/bin/pip install -q --upgrade pip
    .venv/bin/pip install -q -e ".[cpu,test,r]"
    touch .venv/.installed
fi

# The kerasdist R package, in a project-local library (.Rlib) that lessons and R users can add to .libPaths().
if command -v R >/dev/null; then
    mkdir -p .Rlib
    if [ ! -f .Rlib/kerasdist/DESCRIPTION ] || [ -n "$(find r -newer .Rlib/kerasdist/DESCRIPTION -type f | head -1)" ]; then
        R CMD INSTALL --no-test-load -l .Rlib r >/dev/null
    fi
fi
