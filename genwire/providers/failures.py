"""What one failed attempt of an HTTP request is, shared by the model client
(``providers.openai``) and batch mode's control calls (``providers.batch.collector``), so
neither imports the other's private names."""

from __future__ import annotations

from genwire.errors import ErrorClass

__all__ = ["MAX_RETRY_WAIT_S", "AttemptFailure"]

# Upper bound for any single wait between attempts (backoff or Retry-After): a server
# asking for minutes would otherwise stall a run silently.
MAX_RETRY_WAIT_S = 30.0


class AttemptFailure(Exception):
    """One failed attempt, classified; turned into a ModelError when retries run out."""

    def __init__(self, error_class: ErrorClass, message: str, *, retry: bool, retry_after: float | None) -> None:
        super().__init__(message)
        self.error_class = error_class
        self.message = message
        self.retry = retry
        self.retry_after = retry_after
