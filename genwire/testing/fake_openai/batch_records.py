"""The fake batch API's records and wire pieces: an uploaded file, a batch and what it
reports of itself, an output line, an error answer (used by ``batches``)."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

from aiohttp import web

ENDPOINTS = {"/v1/chat/completions": "chat", "/v1/embeddings": "embeddings"}
OPEN_STATUSES = ("validating", "in_progress", "finalizing", "cancelling")


@dataclass
class BatchFile:
    """An uploaded or produced file of the Files API."""

    id: str
    purpose: str
    filename: str
    content: bytes
    created_at: int

    def public(self) -> dict[str, Any]:
        return {
            "id": self.id,
            "object": "file",
            "bytes": len(self.content),
            "created_at": self.created_at,
            "filename": self.filename,
            "purpose": self.purpose,
        }


@dataclass
class BatchRecord:
    """One batch: its request, its scripted fate and its progress."""

    id: str
    endpoint: str
    input_file_id: str
    completion_window: str
    headers: dict[str, str]
    created: float
    held: bool
    expire_fraction: float | None
    metadata: dict[str, Any] | None
    failure: str | None = None  # scripted: ends failed with this message
    expiry_message: str | None = None  # scripted: the error message of its unrun lines
    status: str = "validating"
    total: int = 0
    completed: int = 0
    failed: int = 0
    output_file_id: str | None = None
    error_file_id: str | None = None
    errors: Any = None
    timestamps: dict[str, int] = field(default_factory=dict)

    def public(self) -> dict[str, Any]:
        return {
            "id": self.id,
            "object": "batch",
            "endpoint": self.endpoint,
            "errors": self.errors,
            "input_file_id": self.input_file_id,
            "completion_window": self.completion_window,
            "status": self.status,
            "output_file_id": self.output_file_id,
            "error_file_id": self.error_file_id,
            "created_at": int(self.created),
            **self.timestamps,
            "request_counts": {"total": self.total, "completed": self.completed, "failed": self.failed},
            "metadata": self.metadata,
        }


def output_line(custom_id: str, response: dict[str, Any] | None, error: dict[str, Any] | None) -> bytes:
    record = {"id": f"batch_req_{custom_id}", "custom_id": custom_id, "response": response, "error": error}
    return json.dumps(record, separators=(",", ":")).encode() + b"\n"


def error_response(status: int, message: str) -> web.Response:
    body = {"error": {"message": message, "type": "invalid_request_error", "param": None, "code": None}}
    return web.json_response(body, status=status)
