"""A run's money and figures in one room (SPEC §16, §19): the accounting every engine feeds.

Owns the run's accounts (``accounts``: usage, cost, ledger, metrics, a pool's per-endpoint
figures, the trace), prices and the budget's meter attached to every provider (``costs``), and
what the rest of a run will cost and take (``estimate``).

May import: ``engine.report`` (a session's end writes the report page), ``engine.gates``,
``engine.records`` and the layers below the engine. Independent of ``engine.rows``.
"""
