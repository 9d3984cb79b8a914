"""Moved to ``kerasdist.cluster.roles``; ``import kerasdist.roles`` (as older lessons do) still gives that module."""

import importlib
import sys

sys.modules[__name__] = importlib.import_module("kerasdist.cluster.roles")
