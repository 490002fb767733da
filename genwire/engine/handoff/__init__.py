"""The dataset hand-off (SPEC §24): a finished run's dataset card (``card``), a folder
``datasets.load_dataset`` loads (``export``), and an upload to the Hugging Face Hub
(``push``). Everything is read from the run's own records — ``<output>.run.json``, the
report data a run writes beside its report page (``engine.report.record``) — and streamed
from its output and rejected files: no second bookkeeping, flat memory in the rows.
pyarrow and huggingface_hub are imported only by the steps that need them.

A room at the top of the engine, beside ``engine.run``: may import ``engine.report``,
``engine.gates`` and ``engine.records``; nothing of the engine imports it (the CLI does)."""
