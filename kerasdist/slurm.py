"""Moved to ``kerasdist.cluster.slurm``; ``import kerasdist.slurm`` (as older lessons do) still gives that module."""

import importlib
import sys

sys.modules[__name__] = importlib.import_module("kerasdist.cluster.slurm")
