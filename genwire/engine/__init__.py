"""genwire.engine: the run, in rooms that stack (docs/architecture.md, issue 50).

From the top: ``run`` (the conductor and the run's life) and ``handoff`` (a finished run's
card, export and push) → ``cluster`` (Ray) → ``rows`` (how a
batch is made) and ``money`` (the run's accounts, costs, estimate) → ``report`` (the report
page) → ``gates`` (quality gates) → ``records`` (what a run keeps on disk). A room imports only
from the rooms below it (an import-linter ``layers`` contract in pyproject.toml).
"""
