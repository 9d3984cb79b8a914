"""Moved to ``kerasdist.cluster.slurm``; its public names stay here for code written before the move."""

from kerasdist.cluster.slurm import *  # noqa: F403
