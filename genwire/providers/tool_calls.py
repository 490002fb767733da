"""The assistant message of an OpenAI chat answer that may carry ``tool_calls`` (SPEC §18):
read and checked once, for fresh answers and for answers read back from the cache."""

from __future__ import annotations

from typing import Any


def assistant_message(data: Any) -> dict[str, Any] | str:
    """``{"role": "assistant", "content": str | None, "tool_calls": [...]}`` (tool_calls
    only when present) from a chat response, or why it is not one (a string)."""
    if not isinstance(data, dict):
        return "is not a JSON object"
    choices = data.get("choices")
    if not isinstance(choices, list) or not choices or not isinstance(choices[0], dict):
        return "has no choices"
    message = choices[0].get("message")
    if not isinstance(message, dict):
        return "has no choices[0].message"
    content = message.get("content")
    if content is not None and not isinstance(content, str):
        return "has a choices[0].message.content that is not text"
    out: dict[str, Any] = {"role": "assistant", "content": content}
    calls = message.get("tool_calls")
    if calls:
        if not isinstance(calls, list):
            return "has tool_calls that are not a list"
        checked = []
        for i, call in enumerate(calls):
            fn = call.get("function") if isinstance(call, dict) else None
            if not isinstance(fn, dict) or not isinstance(fn.get("name"), str) or not isinstance(call.get("id"), str):
                return f"has a tool_calls[{i}] without id and function.name"
            arguments = fn.get("arguments", "{}")
            if not isinstance(arguments, str):
                return f"has a tool_calls[{i}].function.arguments that is not a JSON string"
            checked.append(
                {"id": call["id"], "type": "function", "function": {"name": fn["name"], "arguments": arguments}}
            )
        out["tool_calls"] = checked
    elif not isinstance(content, str) or not content.strip():
        finish = choices[0].get("finish_reason")
        hint = f" (finish_reason={finish!r})" if isinstance(finish, str) else ""
        return f"has neither text nor tool_calls in choices[0].message{hint}"
    return out


def is_assistant_message(answer: Any) -> bool:
    """Whether a stored ``converse`` answer passes a fresh one's check."""
    if not isinstance(answer, dict) or answer.get("role") != "assistant":
        return False
    rebuilt = assistant_message({"choices": [{"message": answer}]})
    return isinstance(rebuilt, dict)
