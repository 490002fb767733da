"""How one batch of rows is made, in any engine (SPEC §9): columns in order, per-row failures
kept apart, in-order gates taken in turn.

Owns the batch runner (``runner``: ``BatchRunner``, used by the local engine and by every Ray
worker), the failure-rate stop judged as rows settle (``failure_stop``: the session's judge and
each Ray worker's), the local engine's batches in flight (``local``) and the garbage
collector's settings while rows are made (``collector``).

May import: ``engine.gates``, ``engine.records`` and the layers below the engine. Independent of
``engine.money``: the meter a request goes through is attached to its provider, not handed here.
"""
