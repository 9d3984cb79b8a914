"""What lessons 08 and 09 measure: rates and rooflines, the speed ladder, all-reduce costs, JAX collectives.

``speed`` (FLOPs per sample, matrix-product and bandwidth rates), ``speed_ladder`` (lesson 08's
rungs), ``sync_cost`` (ring all-reduce and its transports, α-β fits), ``jax_collectives``,
``same_batches`` (the data order two runs share) and ``json_child`` (the bounded child process
that answers one JSON line). May import the base, ``kerasdist.state``, ``kerasdist.engines``
and ``kerasdist.cluster``.
"""
