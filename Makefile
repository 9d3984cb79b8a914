# The two commands of the README: `make demo` (the main job) and `make test` (all tests, what CI
# runs); `make check` (the quick tier, for the edit loop), `make lab` (the lessons in JupyterLab),
# `make site` (the course website in build/site, built from the executed lessons) and
# `make test-debian13` (set-up, demo and core tests again in a Debian 13 root). Each sets everything
# up first (scripts/setup.sh is idempotent; it picks the GPU build of TensorFlow when nvidia-smi
# finds a GPU).

.PHONY: setup demo check test test-debian13 lab site

setup:
	bash scripts/setup.sh

demo: setup
	.venv/bin/kerasdist compare --replicas 1,2 --epochs 3 --data auto --mode both --out results

check:
	bash scripts/setup.sh test
	bash scripts/test.sh check

test:
	bash scripts/setup.sh test
	bash scripts/test.sh

# The second platform: set-up, the demo, the R package, the CLI tests and lessons 00-01 in a
# Debian 13 root (root only; it skips elsewhere and fails in CI).
test-debian13:
	bash scripts/test_debian13.sh

# Extra JupyterLab options: make lab LAB_ARGS="--port 8890 --no-browser"
lab:
	bash scripts/setup.sh lab
	bash scripts/lab.sh $(LAB_ARGS)

site:
	bash scripts/setup.sh site
	bash scripts/site.sh
