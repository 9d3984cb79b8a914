"""The experiment: one device against N replicas on the same seed and data order, its files and figures.

``compare.run_comparison`` runs it, ``comparison_files`` writes its JSON and CSV, ``plots``
draws the convergence and throughput figures. May import everything below it: the base,
``kerasdist.state``, ``kerasdist.engines``, ``kerasdist.cluster`` and ``kerasdist.measure``.
"""
