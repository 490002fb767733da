"""Batch-API mode (SPEC §14): requests collected into OpenAI Batch files, uploaded,
polled and resolved, with a ledger (the run's journal) so no request is paid twice.

* ``format``: the OpenAI Batch file format: request lines, result lines, custom ids.
* ``ledger``: what the collector needs of the run's journal (the engine implements it).
* ``collector``: ``BatchCollector``, one per provider in batch mode.
"""
