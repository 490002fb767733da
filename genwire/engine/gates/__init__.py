"""Quality gates' run (SPEC §21): N good rows, not N rows.

Owns which candidates to start next and when enough are kept (``plan``: ``CandidatePlan``,
``GatedRun``, the rejected file), the in-order gates' turns (``turns``), what a gated run's
columns and rejected candidates cost, read from the ledger (``costs``), and the estimate of a
gated pipeline (``estimate``). The gates' generators themselves live in
``genwire.generators.builtin`` (keep-if, keep-valid, keep-unique, keep-novel).

May import: ``engine.records`` and the layers below the engine.
"""
