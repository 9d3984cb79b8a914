# The two commands of the README: `make demo` (the main job) and `make test` (all tests, what CI
# runs), `make check` (the quick tier, for the edit loop) and `make lab` (the lessons in JupyterLab).
# Each sets everything up first (scripts/setup.sh is idempotent; it picks the GPU build of TensorFlow
# when nvidia-smi finds a GPU).

.PHONY: setup demo check test lab

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

# Extra JupyterLab options: make lab LAB_ARGS="--port 8890 --no-browser"
lab:
	bash scripts/setup.sh lab
	bash scripts/lab.sh $(LAB_ARGS)
