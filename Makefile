# The two commands of the README: `make demo` (the main job) and `make test` (all tests).
# Each sets everything up first (scripts/setup.sh is idempotent).

.PHONY: setup demo test

setup:
	bash scripts/setup.sh

demo: setup
	.venv/bin/kerasdist compare --replicas 1,2 --epochs 3 --data auto --mode both --out results

test: setup
	bash scripts/test.sh
