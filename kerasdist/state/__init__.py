"""What a run leaves on disk: both backends' checkpoints, the run identity, atomic files, locks, metrics log.

May import the base (``kerasdist.errors``, ``kerasdist.divergence``, ...) and nothing above it:
the engines, the command line and the lessons use these stores, never the other way round.
"""
