#!/usr/bin/env bash
# Run every test: pytest (core, CLI, R bridge) and nbval (lessons) in one run, then testthat.
set -euo pipefail
cd "$(dirname "$0")/.."
.venv/bin/python -m pytest --nbval-lax --nbval-current-env tests notebooks "$@"
