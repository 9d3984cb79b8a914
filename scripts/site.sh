#!/usr/bin/env bash
# Build the course website (`make site` sets up first) from the committed, executed lessons: nothing runs again.
#
#   bash scripts/site.sh          build into build/site (open build/site/index.html)
#   bash scripts/site.sh DIR      build into DIR
#
# Sphinx reads docs/ (conf.py, the landing page, the reference pages) and notebooks/; any
# warning fails the build. Offline: the theme ships its assets.
set -euo pipefail
cd "$(dirname "$0")/.."
out=${1:-build/site}
.venv/bin/python -m sphinx -W --keep-going -q -b html -c docs . "$out"
echo "The course website is in $out: open $out/index.html"
