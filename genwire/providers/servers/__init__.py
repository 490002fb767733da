"""Managed inference servers (SPEC §23): vLLM, SGLang, llama.cpp or any command, started by
genwire in a process group of its own under the tool servers' reaper, checked until ready,
restarted when they die mid-run, and stopped at every ending.

``fleet.ServerFleet`` is what the container holds: the servers of one config, started
only when a wired model reaches them. ``commands`` builds each kind's argv and
environment, ``replica`` runs one process, ``logs`` keeps its capped log, ``held`` the
``genwire serve`` state file, ``xllama`` serves a GGUF through xllamacpp.
"""
