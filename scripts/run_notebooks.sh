#!/usr/bin/env bash
# Execute lessons in place (outputs are saved into the .ipynb) with the project's virtualenv kernel.
#
#   bash scripts/run_notebooks.sh              Python lessons + R notebooks that need only reticulate
#   bash scripts/run_notebooks.sh --r-twins    the keras3 R twins (needs keras3 and tfdatasets in R)
#   bash scripts/run_notebooks.sh --all        both
#   bash scripts/run_notebooks.sh notebooks/01_quickstart.ipynb ...   just these
#
# KERASDIST_DATA picks the lessons' data: "sample" by default here, so committed outputs are the
# same on every machine; KERASDIST_DATA=auto uses full MNIST where it is cached or downloadable.
# Each lesson that runs without keras3 is then run once more on a stand-in MNIST of another size, and
# the numbers it printed are recorded in tests/data/standin_numbers.json (tests/test_lesson_numbers.py
# checks with them that the lesson types no figure of its run).
set -euo pipefail
cd "$(dirname "$0")/.."

PYTHON=.venv/bin/python
[ -x "$PYTHON" ] || { echo "run_notebooks: no .venv; run 'make setup' first" >&2; exit 2; }
export KERASDIST_DATA=${KERASDIST_DATA:-sample}
# Committed outputs never depend on the user's own caches and settings (a kerasdist doctor cache,
# keras.json, matplotlibrc, IPython start-up files): this run gets its own, as a test run does
# (USER_STATE in conftest.py).
user_state=$(mktemp -d)
trap 'rm -rf "$user_state"' EXIT
unset KERAS_BACKEND TF_CONFIG
eval "$("$PYTHON" - "$user_state" <<'PY'
import shlex, sys
sys.path.insert(0, ".")
from conftest import user_state_environment
for variable, value in user_state_environment(sys.argv[1]).items():
    print(f"export {variable}={shlex.quote(value)}")
PY
)"

# Sort notebooks into "plain" (Python lessons, reticulate-only R notebooks) and keras3 R twins,
# the same way conftest.py (nbval's set-up for the lessons) does: a twin is an R notebook whose %%R cells load keras3/tfdatasets.
classify() {
    "$PYTHON" - "$@" <<'PY'
import sys
sys.path.insert(0, ".")
from conftest import is_keras3_twin
for path in sys.argv[1:]:
    print(("keras3" if is_keras3_twin(path) else "plain"), path)
PY
}

mode=plain
notebooks=()
for arg in "$@"; do
    case "$arg" in
        --r-twins) mode=keras3 ;;
        --all) mode=all ;;
        -h|--help) sed -n '2,10p' "$0"; exit 0 ;;
        -*) echo "run_notebooks: unknown option $arg (use --r-twins, --all or notebook paths)" >&2; exit 2 ;;
        *) notebooks+=("$arg"); mode=given ;;
    esac
done
if [ ${#notebooks[@]} -eq 0 ]; then
    notebooks=(notebooks/[0-9][0-9]_*.ipynb)
fi

selected=()
declare -A kind_of
while read -r kind path; do
    kind_of[$path]=$kind
    case "$mode" in
        plain) [ "$kind" = plain ] && selected+=("$path") ;;
        keras3) [ "$kind" = keras3 ] && selected+=("$path") ;;
        *) selected+=("$path") ;;
    esac
    if [ "$kind" = keras3 ] && [ "$mode" != plain ] && [ -z "${checked_r:-}" ]; then
        checked_r=1
        Rscript -e 'pkgs <- c("keras3", "tfdatasets")' \
                -e 'quit(status = !all(sapply(pkgs, requireNamespace, quietly = TRUE)))' \
            || { echo "run_notebooks: the R twins need keras3 and tfdatasets in R:" \
                      "install.packages(c(\"keras3\", \"tfdatasets\"))" >&2; exit 2; }
    fi
done < <(classify "${notebooks[@]}")

elapsed() {  # seconds since $1 (a `date +%s%N` stamp), one decimal
    local ms=$(( ($(date +%s%N) - $1) / 1000000 ))
    printf "%d.%d" $((ms / 1000)) $((ms % 1000 / 100))
}

total_start=$(date +%s%N)
for notebook in "${selected[@]}"; do
    start=$(date +%s%N)
    .venv/bin/jupyter nbconvert --to notebook --execute --inplace \
        --ExecutePreprocessor.kernel_name=python3 \
        --ExecutePreprocessor.timeout=600 \
        --ExecutePreprocessor.record_timing=False \
        --log-level=WARN "$notebook"
    # One stream output per cell and stream: R's cat() and flushes otherwise store each piece
    # separately, which GitHub and nbconvert show one piece per line.
    .venv/bin/jupyter nbconvert --coalesce-streams --inplace --log-level=WARN "$notebook"
    printf '%-45s %6s s\n' "$notebook" "$(elapsed "$start")"
    if [ "${kind_of[$notebook]}" = plain ]; then
        start=$(date +%s%N)
        "$PYTHON" tests/test_lesson_numbers.py "$notebook"
        printf '%-45s %6s s\n' "$notebook on the stand-in" "$(elapsed "$start")"
    fi
done
printf '%-45s %6s s\n' "all ${#selected[@]} notebooks" "$(elapsed "$total_start")"
