"""What a run leaves on disk: checkpoints of both backends, the run's identity, atomic files, locks, the metrics log.

May import the base (``kerasdist.errors``, ``kerasdist.divergence``, ...) and nothing above it:
the engines, the command line and the lessons use these stores, never the other way round.
"""
