"""The run's life, on top of the engine's rooms: ``run_pipeline`` (``conductor``) reads as its
stages — plan, open the checkpoint, the pre-flight, the session, the output.

Owns the conductor (``conductor``), one session over a checkpoint (``session``: the engine —
local or Ray — batch mode and the output sink), how a run goes (``options``: ``RunOptions``),
where batch results go in row order (``sink``) and batch mode in a run (``batch_mode``).

May import every room below it: ``engine.cluster``, ``engine.rows``, ``engine.money``,
``engine.report``, ``engine.gates``, ``engine.records``.
"""
