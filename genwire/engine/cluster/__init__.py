"""The same run on a Ray cluster (SPEC §22): every guarantee of the local engine kept.

Owns the Ray engine (``engine``: the driver and its block workers), the one keeper of the
in-order gates (``keeper``), what the workers share — the budget, each model's brake, the
endpoints out (``shared``, with the budget's ``coordinator`` actor) — the rows handed out in
blocks (``block_rows``), a worker's batch slots (``batch_slots``), the drains that bring a
worker's paid answers to the driver as they settle (``drain``), and the Ray instance genwire
starts with the reaper that ends its processes (``instance``, ``reaper``). ``ray`` is imported only
by a run that uses this engine.

May import: ``engine.rows``, ``engine.money``, ``engine.report``, ``engine.gates``,
``engine.records`` and the layers below the engine; never ``engine.run``.
"""
