"""Moved to ``kerasdist.cluster.roles``; its public names stay here for code written before the move."""

from kerasdist.cluster.roles import *  # noqa: F403
