"""The fake OpenAI server's tool calling: a request that offers ``tools`` is answered
with ``tool_calls`` by a deterministic script, so a tool loop can be tested end to end.

By default the first turn of a conversation calls the first offered tool, filling each
required string argument with the user's prompt (others with an instance of their
schema); once the conversation holds tool results, the answer is text quoting them. A
``ToolScript`` (``FakeOpenAIServer.tool_calls_when``) replaces that for conversations
whose prompt contains a substring: turn *n* (the number of assistant messages so far)
makes the calls listed at position *n*, and a turn past the list answers in text.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from genwire.testing.fake_openai.schema_instances import schema_instance

# (tool name, arguments): a mapping, or a string sent as is (to script broken JSON).
Call = tuple[str, Mapping[str, Any] | str]


@dataclass(frozen=True)
class ToolScript:
    substring: str
    turns: tuple[tuple[Call, ...], ...]


def _prompt(messages: Sequence[Any]) -> str:
    users = [m.get("content") for m in messages if isinstance(m, dict) and m.get("role") == "user"]
    return next((u for u in users if isinstance(u, str)), "")


def _default_arguments(parameters: Any, prompt: str) -> dict[str, Any]:
    if not isinstance(parameters, dict):
        return {}
    found = parameters.get("properties")
    props: dict[str, Any] = found if isinstance(found, dict) else {}
    out: dict[str, Any] = {}
    for name in parameters.get("required") or []:
        prop = props.get(name, {})
        out[name] = prompt[:200] if isinstance(prop, dict) and prop.get("type") == "string" else schema_instance(prop)
    return out


def tool_turn(body: Mapping[str, Any], scripts: Sequence[ToolScript]) -> tuple[str | None, list[dict[str, Any]]]:
    """(text, tool_calls) answering a chat request that offers tools: text None with
    calls, or text with no calls (the final answer)."""
    messages = body.get("messages") if isinstance(body.get("messages"), list) else []
    assert isinstance(messages, list)
    prompt = _prompt(messages)
    turn = sum(1 for m in messages if isinstance(m, dict) and m.get("role") == "assistant")
    results = [m.get("content") for m in messages if isinstance(m, dict) and m.get("role") == "tool"]
    script = next((s for s in scripts if s.substring in prompt), None)
    calls: Sequence[Call]
    if script is not None:
        calls = script.turns[turn] if turn < len(script.turns) else ()
    elif turn == 0:
        tools = body.get("tools") or [{}]
        first = tools[0].get("function") if isinstance(tools[0], dict) else None
        first = first if isinstance(first, dict) else {}
        calls = [(str(first.get("name")), _default_arguments(first.get("parameters"), prompt))]
    else:
        calls = ()
    if not calls:
        quoted = " | ".join(str(r)[:80] for r in results)
        return f"answer to: {prompt[:40]} [from {len(results)} tool results: {quoted}]", []
    return None, [
        {
            "id": f"call_{turn}_{i}",
            "type": "function",
            "function": {"name": name, "arguments": args if isinstance(args, str) else json.dumps(args)},
        }
        for i, (name, args) in enumerate(calls)
    ]
