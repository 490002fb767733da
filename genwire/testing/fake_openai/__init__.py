"""The fake OpenAI-compatible server, one module a role (its public face: ``fake_server``).

Layered bottom to top; a module imports only those below it:

* ``scripted``: what a test may script (a status, a ``FakeResponse``, a symbol);
  ``answers``, ``usage``, ``tool_calls``, ``schema_instances``: answer lengths, realistic
  usage, tool-call turns, structured-output instances; ``wire``: the bodies on the wire.
* ``behaviours``: the settings tests change (scripts, failures, limits, shapes...).
* ``answering``: how one admitted request is answered from those settings.
* ``batch_records`` and ``batches``: the Files and Batches API, answering each line
  like an online request.
* ``server``: ``FakeOpenAIServer`` itself: its thread, loop and port, routes, counters.

Nothing is imported here, so a test that needs only ``usage`` does not load aiohttp.
"""
