"""The behaviours a test sets on the fake server, and the rules that pick a request's fate.

``FakeBehaviours`` holds every setting (``script``, ``fail_when``, ``rate_limit``,
``shape_answers``, ``serve_as``...) behind one lock; ``FakeOpenAIServer`` inherits it, so
tests call these methods on the server. Settings may change from any thread at any time.
"""

from __future__ import annotations

import asyncio
import random
import threading
import time
from collections import defaultdict, deque
from collections.abc import Callable, Iterable, Sequence

from genwire.testing.fake_openai.answers import AnswerShape
from genwire.testing.fake_openai.scripted import Scripted, check_scripted
from genwire.testing.fake_openai.tool_calls import Call, ToolScript
from genwire.testing.fake_openai.usage import RealisticUsage


class FakeBehaviours:
    """The fake server's settings and the lookups its answers make in them."""

    released: int  # requests ``hold`` let go on its condition (a counter of the server's stats)

    def __init__(self) -> None:
        self._latency: dict[str, float] = {}
        self._dimensions: dict[str, int] = {}
        self._scripts: dict[str, deque[Scripted]] = defaultdict(deque)
        self._fail_when: dict[str, list[tuple[str, Scripted]]] = defaultdict(list)
        self._fail_rate: dict[str, tuple[float, tuple[Scripted, ...], random.Random]] = {}
        self._api_key: str | None = None
        self._hold: tuple[Callable[[], bool], float] | None = None  # ``hold``
        self._buckets: dict[str | None, TokenBucket] = {}  # per model; None: every other model
        self._no_response_format: set[str] = set()
        self._rejected_tools: dict[str, set[str]] = {}  # model -> tool names whose schema it refuses
        self._varied: set[str] = set()
        self._padding_mb: dict[str, float] = {}  # per model ("*": all): whitespace before answers
        self._answers_varied = 0
        self._tool_scripts: list[ToolScript] = []  # see genwire.testing.fake_openai.tool_calls
        self._realistic: dict[str, RealisticUsage] = {}  # per model ("*": all)
        self._shapes: dict[str, AnswerShape] = {}  # per model ("*": all); see shape_answers
        self._advertised: dict[str, dict[str, str]] = {}  # x-ratelimit-limit-* headers, per model ("*": all)
        self._answer_fns: dict[str, Callable[[str], str]] = {}  # per model: the chat answer to a prompt
        self._varied_structured: set[str] = set()  # models ("*": all) whose structured answers vary by prompt
        self._served_as: dict[str, str] = {}  # model asked -> the model id its chat answers name
        self._lock = threading.Lock()

    # --- configuration -----------------------------------------------------------------

    def set_latency(self, model: str, seconds: float) -> None:
        """Every request for ``model`` waits ``seconds`` before it is answered."""
        with self._lock:
            self._latency[model] = seconds

    def set_dimensions(self, model: str, n: int) -> None:
        with self._lock:
            self._dimensions[model] = n

    def reject_response_format(self, model: str, reject: bool = True) -> None:
        """``model`` answers 400 to any request carrying ``response_format`` (as models
        and gateways without structured output do)."""
        with self._lock:
            if reject:
                self._no_response_format.add(model)
            else:
                self._no_response_format.discard(model)

    def answer_with(self, model: str, answer: Callable[[str], str] | None) -> None:
        """``model``'s chat answers are ``answer(prompt)`` (the last message's text), e.g.
        a judge's JSON scoring each prompt its own way; None: the default answers again."""
        with self._lock:
            if answer is None:
                self._answer_fns.pop(model, None)
            else:
                self._answer_fns[model] = answer

    def serve_as(self, model: str, named: str) -> None:
        """Chat answers to ``model`` name ``named`` as their model (a server that serves
        an alias as a dated snapshot does)."""
        with self._lock:
            self._served_as[model] = named

    def vary_structured(self, model: str = "*", vary: bool = True) -> None:
        """``model``'s structured answers vary with the prompt (deterministically): a
        bounded integer (a judge's score) or an enum takes a value of its own per prompt."""
        with self._lock:
            if vary:
                self._varied_structured.add(model)
            else:
                self._varied_structured.discard(model)

    def reject_tool_schema(self, model: str, tool: str) -> None:
        """``model`` answers 400 to any request offering tool ``tool`` (as a provider does
        that refuses a tool's JSON schema)."""
        with self._lock:
            self._rejected_tools.setdefault(model, set()).add(tool)

    def vary_answers(self, model: str = "*", vary: bool = True) -> None:
        """Plain chat answers for ``model`` ("*": every model) end with `` #N``, N a serial
        number: two requests never get the same answer, as with a sampling model (so a
        test can tell a cached answer from a new one)."""
        with self._lock:
            if vary:
                self._varied.add(model)
            else:
                self._varied.discard(model)

    def pad_answers(self, model: str = "*", mb: float = 0.0) -> None:
        """Send ``mb`` MiB of JSON whitespace before each normal answer of ``model`` ("*":
        every model), streamed without a Content-Length: a valid but huge body. ``math.inf``
        streams whitespace until the client goes away (a broken proxy); 0 turns it off."""
        with self._lock:
            if mb > 0:
                self._padding_mb[model] = mb
            else:
                self._padding_mb.pop(model, None)

    def realistic_usage(self, model: str = "*", usage: RealisticUsage | None = None) -> None:
        """Answers of ``model`` ("*": every model) report realistic ``usage`` (prompt tokens
        ≈ characters / 4 with a spread; answers of varying length, at most ``max_tokens``)
        and chat answers are that long. None turns it off (tokens = words, the default)."""
        with self._lock:
            if usage is None:
                self._realistic.pop(model, None)
            else:
                self._realistic[model] = usage

    def shape_answers(
        self,
        model: str = "*",
        *,
        tokens: int = 0,
        grow_to: int | None = None,
        over: int = 1,
        ignore_max_tokens: bool = False,
        omit_usage: bool = False,
        honoured: int = 0,
    ) -> None:
        """Plain chat answers of ``model`` ("*": every model) are ``tokens`` tokens long,
        growing linearly to ``grow_to`` by the ``over``-th answer; bounded by the request's
        ``max_tokens`` unless ``ignore_max_tokens`` (after the first ``honoured`` answers:
        a model that keeps it, then grows past it). ``omit_usage``: answers carry no
        ``usage`` (``prompt_tokens`` / ``completion_tokens`` still count what was billed).
        ``tokens=0`` keeps the usual lengths. A request with ``n`` gets ``n`` choices, and
        is billed for each. Called with ``model`` alone, it turns the shaping off."""
        shape = AnswerShape(tokens, grow_to, over, ignore_max_tokens, omit_usage, honoured)
        with self._lock:
            if shape.sized or omit_usage:
                self._shapes[model] = shape
            else:
                self._shapes.pop(model, None)

    def advertise_limits(self, model: str = "*", *, requests: int | None = None, tokens: int | None = None) -> None:
        """Answers of ``model`` ("*": every model) carry ``x-ratelimit-limit-requests`` /
        ``-tokens`` (per minute, as OpenAI sends them); no argument removes them."""
        headers = {}
        if requests is not None:
            headers["x-ratelimit-limit-requests"] = str(requests)
        if tokens is not None:
            headers["x-ratelimit-limit-tokens"] = str(tokens)
        with self._lock:
            if headers:
                self._advertised[model] = headers
            else:
                self._advertised.pop(model, None)

    def hold(self, until: Callable[[], bool] | None, timeout_s: float = 60.0) -> None:
        """Every request waits, before its latency, until ``until()`` is true (asked every
        20 ms in the server's thread) or ``timeout_s`` passed; ``released`` counts the
        requests ``until`` let go. None: no hold."""
        with self._lock:
            self._hold = None if until is None else (until, timeout_s)

    async def _held(self) -> None:
        with self._lock:
            hold = self._hold
        if hold is None:
            return
        until, timeout_s = hold
        deadline = time.monotonic() + timeout_s
        while not until():
            if time.monotonic() >= deadline:
                return
            await asyncio.sleep(0.02)
        with self._lock:
            self.released += 1

    def require_api_key(self, key: str | None) -> None:
        """Requests without ``Authorization: Bearer <key>`` get 401 (None: no check)."""
        with self._lock:
            self._api_key = key

    def rate_limit(
        self,
        requests_per_s: float | None,
        *,
        burst: float | None = None,
        retry_after: float = 1.0,
        model: str | None = None,
    ) -> None:
        """Admit ``requests_per_s`` (a token bucket holding ``burst``, default one
        second's worth); beyond it answer 429 with ``Retry-After``. None removes it.

        ``model`` limits that model alone (as hosted APIs do); without it one bucket is
        shared by every model that has no limit of its own."""
        with self._lock:
            if requests_per_s is None:
                self._buckets.pop(model, None)
            else:
                capacity = burst if burst is not None else max(1.0, requests_per_s)
                self._buckets[model] = TokenBucket(requests_per_s, capacity, retry_after)

    def script(self, model: str, responses: Iterable[Scripted]) -> None:
        """Queue answers for ``model``: one per request, then back to normal."""
        items = list(responses)
        for item in items:
            check_scripted(item)
        with self._lock:
            self._scripts[model].extend(items)

    def tool_calls_when(self, substring: str, turns: Iterable[Iterable[Call]]) -> None:
        """Conversations whose prompt contains ``substring`` and that offer tools: turn n
        makes the calls at ``turns[n]`` ((name, arguments) pairs), then answers in text."""
        script = ToolScript(substring, tuple(tuple(t) for t in turns))
        with self._lock:
            self._tool_scripts.insert(0, script)

    def fail_when(self, model: str, substring: str, status: Scripted = 500) -> None:
        """Every request for ``model`` whose text contains ``substring`` gets ``status``.

        The text is the chat messages' content or the embedding inputs. ``model="*"``
        applies to every model.
        """
        check_scripted(status)
        with self._lock:
            self._fail_when[model].append((substring, status))

    def fail_rate(
        self,
        model: str,
        rate: float,
        statuses: Sequence[Scripted] = (503,),
        seed: int = 0,
    ) -> None:
        """A seeded random ``rate`` of requests for ``model`` ("*": every model without a
        rate of its own) fail with one of ``statuses``."""
        for item in statuses:
            check_scripted(item)
        with self._lock:
            if rate <= 0:
                self._fail_rate.pop(model, None)
            else:
                self._fail_rate[model] = (rate, tuple(statuses), random.Random(seed))

    def clear(self, model: str | None = None) -> None:
        """Drop scripts, fail_when and fail_rate rules (for ``model``, or all)."""
        with self._lock:
            if model is None:
                self._tool_scripts.clear()
            for rules in (self._scripts, self._fail_when, self._fail_rate):
                if model is None:
                    rules.clear()
                else:
                    rules.pop(model, None)

    def _bucket_of(self, model: str) -> TokenBucket | None:
        # Caller holds the lock. A model without a limit of its own shares the default one.
        return self._buckets.get(model, self._buckets.get(None))

    def _next_item(self, model: str, texts: list[str]) -> Scripted | None:
        # Caller holds the lock. Order: the script queue, then content rules, then chance.
        queue = self._scripts.get(model)
        if queue:
            return queue.popleft()
        for rules_model in (model, "*"):
            for substring, item in self._fail_when.get(rules_model, ()):
                if any(substring in t for t in texts):
                    return item
        chance = self._fail_rate.get(model) or self._fail_rate.get("*")
        if chance is not None:
            rate, statuses, rng = chance
            if rng.random() < rate:
                return rng.choice(statuses)
        return None


class TokenBucket:
    """``rate`` tokens per second, holding at most ``capacity``; a request takes one."""

    def __init__(self, rate: float, capacity: float, retry_after: float) -> None:
        self.rate, self.capacity, self.retry_after = rate, capacity, retry_after
        self.tokens = capacity
        self.stamp = time.monotonic()

    def take(self, now: float) -> bool:
        self.tokens = min(self.capacity, self.tokens + (now - self.stamp) * self.rate)
        self.stamp = now
        if self.tokens >= 1:
            self.tokens -= 1
            return True
        return False
