"""The engine's lowest room: what a run keeps on disk, and the small types every room above shares.

Owns the checkpoint (``checkpoint``, its ``fingerprint``), the ledger of paid answers
(``ledger``), the per-second metrics (``metrics``), batch mode's journal (``batch_journal``),
strict JSON rows (``encoding``) and the atomic writers of the output (``writers``); and the types
that cross rooms: a batch's result (``batch_result``), what a Ray worker paid for (``receipt``),
a gated run's funnel (``funnel``) and a finished run's result (``result``).

May import: config, providers, generators, container, preflight (the layers below the engine).
Never imports another room of the engine (import-linter: the engine's rooms stack).
"""
