"""What a model request knows about the run that sends it: the response cache, the column
and the row(s). Handles do not know the column or the row; the engine and the generators
say them through context variables, so no signature changes and plugins are unaffected.

* The engine opens a ``batch_scope`` (the run's cache and the pipeline seed) per batch
  and a ``column_scope`` for each column's ``generate_batch``; given the batch's rows, the
  column's first lookup fetches every entry stored for that column and those rows in one
  query, so each request's lookup is a dict lookup on its key (no query, no thread hop).
* A generator says which row a request is for with ``cached_row(index)`` (or
  ``cached_rows(indices)`` for one request made for several rows: the request is keyed
  by all of them). The built-in generators do; a plugin may, as documented in the README.
* An embedding request made for one row per text is kept per row (``cache_slots_per_row``):
  each text keyed as if asked alone for its row, so a rerun that batches the rows otherwise
  finds each vector, and only the texts of rows without one are sent.
* A request made with no row said is never cached: two rows must never share a key.
  The pre-flight's probes run outside any batch, so they never read or write the cache.
* The built-in chat columns peek at a whole batch before asking (``peek_many``): one key
  template, one bulk lookup and one update of the accounting per batch and column, so a
  cached rerun's row costs its key and a dict lookup. Each hit counts exactly as a
  request's hit does (``cached``, the tokens it saved).

A run that may stop on its failure rate opens an ``admission_scope``: every request is
admitted (``admit_request``, at the provider's gate, the one point all requests pass)
for the rows of its row block, and a row block that ends with an exception reports its
rows failed as they settle. Once the run is stopping, no request is admitted: it raises
``RunStopping`` and its rows are dropped for the rerun.

Only answers of a row block that ends without an exception are kept (``cached_row``
commits on a clean exit); a generator that rejects an answer inside the block (a reply
that fails its schema) calls ``RowScope.discard()``. Kept answers are written in one
transaction when the column's batch ends.

Kept whole (~420 lines): the scopes that set the context variables and the lookups that
read them (``cache_slot``, ``peek_*``) are one contract; this module is the only place
either happens.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import logging
import math
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextvars import ContextVar
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Protocol

from genwire.errors import NotSent, RunStopping
from genwire.providers.usage import ModelUsage
from genwire.providers.vectors import is_matrix, matrix_problem

if TYPE_CHECKING:  # the store (sqlite3) loads with the first request a run may cache, not with the generators
    from genwire.providers.response_cache.keys import KeyTemplate
    from genwire.providers.response_cache.layout import CachedAnswer, Entry, Stored
    from genwire.providers.response_cache.store import ResponseCache

__all__ = [
    "Admission",
    "AnswerHolds",
    "BatchScope",
    "CacheSlot",
    "ColumnScope",
    "RowScope",
    "admission_scope",
    "admit_request",
    "are_vectors",
    "batch_scope",
    "cache_slot",
    "cache_slots_per_row",
    "cached_row",
    "cached_rows",
    "column_scope",
    "current_rows",
    "endpoint_id",
    "free_row_holds",
    "hold_answer",
    "holding_scope",
    "is_credential_header",
    "is_text",
    "kept_elsewhere",
    "may_hold",
    "peek_answer",
    "peek_in",
    "peek_many",
    "peek_scope",
    "vectors_problem",
]

log = logging.getLogger("genwire.cache")

MAX_TEMPLATES = 4  # key templates a column keeps (see ColumnScope.key)


@dataclass
class BatchScope:
    """One batch of a run: its cache, the pipeline seed (part of every key), the answers
    its rows kept, and its hits."""

    cache: ResponseCache
    seed: int = 0
    kept: list[Entry] = field(default_factory=list)
    hits: int = 0

    def take_kept(self) -> list[Entry]:
        kept, self.kept = self.kept, []
        return kept


@dataclass
class ColumnScope:
    """The column being generated and the entries stored for it and the rows of ``rows``
    (fetched in one query by the column's first lookup: a column that asks no model sends
    no query): a request whose first row is in ``rows`` is a hit exactly when its key is
    in ``found``."""

    name: str
    rows: frozenset[int] = frozenset()
    found: dict[str, Stored] | None = None
    # The key templates of this column's requests (usually one: what its requests share).
    templates: list[KeyTemplate] = field(default_factory=list)

    def key(self, endpoint: str, body: Any, part: Any, rows: tuple[int, ...], seed: int) -> str:
        """``entry_key`` of ``body`` (``HOLE`` in place of ``part``) for ``rows``."""
        return self.template(endpoint, body, seed).key(part, rows)

    def template(self, endpoint: str, body: Any, seed: int) -> KeyTemplate:
        """The key template of the requests ``body`` stands for (``HOLE`` in place of their part)."""
        for template in self.templates:
            if template.matches(endpoint, body):
                return template
        from genwire.providers.response_cache.keys import KeyTemplate  # once per column and batch

        template = KeyTemplate(endpoint, body, self.name, seed)
        # A few kept: a column whose requests differ in more than their part (a plugin
        # varying a param per row) encodes each key whole, as without templates.
        self.templates = [template, *self.templates[: MAX_TEMPLATES - 1]]
        return template

    def stored(self, cache: ResponseCache, key: str) -> Stored | None:
        if self.found is None:
            self.found = cache.get_many(self.name, self.rows)
        return self.found.get(key)

    def found_any(self, cache: ResponseCache) -> bool:
        """Whether anything is stored for this column and ``rows`` (the bulk lookup, made
        now if it was not yet)."""
        if self.found is None:
            self.found = cache.get_many(self.name, self.rows)
        return bool(self.found)


@dataclass(slots=True)
class RowScope:
    rows: tuple[int, ...]
    pending: list[Entry] = field(default_factory=list)
    held: list[Callable[[], None]] = field(default_factory=list)  # its answers' slots held (``hold_answer``)

    def discard(self) -> None:
        """Forget the answers received so far in this block (they were rejected)."""
        self.pending.clear()
        free_row_holds(self)


class AnswerHolds(Protocol):
    """A Ray worker's answers held until the driver stored them (``engine.cluster.holds``)."""

    def committed(self, releases: list[Callable[[], None]]) -> None:
        """A row block ended cleanly: its held answers are kept, for the next drain."""
        ...


class Admission(Protocol):
    """Told each row's requests as they are admitted and its failures as they settle."""

    def sent(self, rows: tuple[int, ...]) -> bool:
        """A request for ``rows`` got its slot: False refuses it (the run is stopping)."""
        ...

    def failed(self, rows: tuple[int, ...]) -> None:
        """A row block for ``rows`` ended with an exception: those rows failed."""
        ...


_batch: ContextVar[BatchScope | None] = ContextVar("genwire_cache_batch", default=None)
_admission: ContextVar[Admission | None] = ContextVar("genwire_admission", default=None)
_column: ContextVar[ColumnScope | None] = ContextVar("genwire_cache_column", default=None)
_row: ContextVar[RowScope | None] = ContextVar("genwire_cache_row", default=None)
_holds: ContextVar[AnswerHolds | None] = ContextVar("genwire_answer_holds", default=None)


@contextlib.contextmanager
def batch_scope(cache: ResponseCache | None, seed: int = 0) -> Iterator[BatchScope | None]:
    if cache is None:
        yield None
        return
    scope = BatchScope(cache, seed)
    token = _batch.set(scope)
    try:
        yield scope
    finally:
        _batch.reset(token)


@contextlib.contextmanager
def admission_scope(admission: Admission | None) -> Iterator[None]:
    """Requests inside are admitted by ``admission`` (None: every one, as outside a run)."""
    token = _admission.set(admission)
    try:
        yield
    finally:
        _admission.reset(token)


def admit_request() -> None:
    """At the provider's gate, as it admits the request (before it takes a slot or a
    paced turn): ``RunStopping`` if the run is stopping, else its rows are under way."""
    admission = _admission.get()
    if admission is not None:
        row = _row.get()
        if not admission.sent(() if row is None else row.rows):
            raise RunStopping()


@contextlib.contextmanager
def holding_scope(holds: AnswerHolds | None) -> Iterator[None]:
    """Answers kept inside hold their provider slot until ``holds`` frees it (a Ray worker)."""
    token = _holds.set(holds)
    try:
        yield
    finally:
        _holds.reset(token)


def hold_answer(release: Callable[[], None]) -> bool:
    """Inside a ``holding_scope``, for a request whose answer the cache may keep: True, and
    ``release`` (which frees its slot) is called once the answer is stored or dropped."""
    if _holds.get() is None:  # every request outside a Ray worker's blocks: nothing more to look up
        return False
    row = _row.get()
    if _batch.get() is None or _column.get() is None or row is None or not row.rows:
        return False
    row.held.append(release)
    return True


def free_row_holds(row: RowScope | None = None) -> None:
    """The slots held by the answers of ``row`` (default: the current row block) freed: its
    next request must not wait on its own answers, which it keeps only when it ends."""
    row = _row.get() if row is None else row
    if row is not None and row.held:
        releases, row.held = row.held, []
        for release in releases:
            release()


@contextlib.contextmanager
def column_scope(column: str, rows: Sequence[int] = ()) -> Iterator[None]:
    """Requests inside are for ``column``. With the batch's ``rows``, the entries stored
    for this column and those rows are looked up in one query, at its first lookup."""
    scope = ColumnScope(column, frozenset(rows))
    token = _column.set(scope)
    try:
        yield
    finally:
        _column.reset(token)


class cached_rows:  # lower case: used as a function, ``with cached_rows(indices):``
    """Requests inside are for the rows ``indices`` (their global positions, as
    ``generate_batch`` receives them); their answers are kept if the block ends cleanly.
    A class rather than a generator-based context manager: it runs once per request."""

    __slots__ = ("_scope", "_token")

    def __init__(self, indices: Sequence[int]) -> None:
        self._scope = RowScope(tuple(map(int, indices)))

    def __enter__(self) -> RowScope:
        self._token = _row.set(self._scope)
        return self._scope

    def __exit__(self, kind: type[BaseException] | None, error: BaseException | None, tb: Any) -> None:
        _row.reset(self._token)
        scope = self._scope
        if scope.held:  # held answers: kept (stored by the next drain) or dropped (freed now)
            holds = _holds.get()
            if kind is None and holds is not None:
                holds.committed(scope.held)
                scope.held = []
            free_row_holds(scope)
        if kind is not None:  # an exception inside the block skips the commit
            if error is not None and isinstance(error, Exception) and not isinstance(error, NotSent):
                admission = _admission.get()
                if admission is not None and self._scope.rows:
                    admission.failed(self._scope.rows)
            return
        batch = _batch.get()
        if batch is not None and self._scope.pending:
            batch.kept.extend(self._scope.pending)


def kept_elsewhere(kept: Sequence[Entry], hits: int) -> None:
    """Answers kept and cache hits of requests another process made for this batch (a Ray
    worker's in-order gates, judged by the cluster's keeper): the batch's own from here."""
    batch = _batch.get()
    if batch is not None:
        batch.kept.extend(kept)
        batch.hits += hits


def cached_row(index: int) -> cached_rows:
    """``cached_rows([index])``: requests inside are for row ``index``."""
    return cached_rows([index])


@dataclass(slots=True)
class CacheSlot:
    """Where one answer is looked up and, once it is good, kept: a request's, or one row's
    part of a request made for several (``cache_slots_per_row``). ``first``: the row the
    store files it under (the first of the request's rows)."""

    batch: BatchScope
    row: RowScope
    column: ColumnScope
    key: str
    first: int

    def get(self, usage: ModelUsage, usable: Callable[[Any], bool]) -> CachedAnswer | None:
        """The stored answer, counted as a hit; None (a miss) when there is none or when it
        fails the checks a fresh answer of this request passes."""
        return _stored_answer(self.batch, self.column, self.first, self.key, usage, usable)

    def keep(self, answer: Any, tokens: tuple[int, int]) -> None:
        """The answer passed the handle's checks: pending until the row block commits."""
        entry = self.batch.cache.entry  # the store's Entry: no import statement per answer
        self.row.pending.append(entry(self.key, self.column.name, self.first, answer, tokens[0], tokens[1]))


def cache_slot(endpoint: str, body: Any, part: Any) -> CacheSlot | None:
    """The slot for a request, or None when it is not cached (no run cache, outside a
    column, or no row said). The request is keyed as sent: ``body`` with ``part`` (its
    messages or inputs) in place of ``HOLE``."""
    batch, column, row = _batch.get(), _column.get(), _row.get()
    if batch is None or column is None or row is None or not row.rows:
        return None
    return CacheSlot(batch, row, column, column.key(endpoint, body, part, row.rows, batch.seed), row.rows[0])


def cache_slots_per_row(endpoint: str, body: Any, parts: Sequence[Any]) -> list[CacheSlot] | None:
    """A slot per row for a request whose part holds one item per row of its row block, in
    order (an embedding request for a batch's texts): item ``i`` keyed as if it had been
    asked alone for row ``i``, so a rerun that batches the rows otherwise (a gated run's
    batches depend on timing) still finds each row's answer. None when the request is not
    cached, or its rows are not one per item (then ``cache_slot`` keys it whole)."""
    batch, column, row = _batch.get(), _column.get(), _row.get()
    if batch is None or column is None or row is None or len(row.rows) != len(parts) or len(parts) < 2:
        return None
    template = column.template(endpoint, body, batch.seed)
    return [
        CacheSlot(batch, row, column, template.key(part, (at,)), at) for part, at in zip(parts, row.rows, strict=True)
    ]


PeekScope = tuple[BatchScope, ColumnScope]


def peek_scope(rows: tuple[int, ...]) -> PeekScope | None:
    """Where a peek for ``rows`` looks, or None when no answer can be stored for it: no run
    cache, no column, or nothing stored for the column and the batch's rows (a first run:
    then a peek builds no request and makes no key)."""
    batch, column = _batch.get(), _column.get()
    if batch is None or column is None or not rows:
        return None
    if rows[0] in column.rows and not column.found_any(batch.cache):
        return None
    return batch, column


def peek_in(
    scope: PeekScope,
    endpoint: str,
    body: Any,
    part: Any,
    rows: tuple[int, ...],
    usage: ModelUsage,
    usable: Callable[[Any], bool],
) -> Any | None:
    """``peek_answer`` where ``peek_scope(rows)`` said to look."""
    batch, column = scope
    key = column.key(endpoint, body, part, rows, batch.seed)
    found = _stored_answer(batch, column, rows[0], key, usage, usable)
    return None if found is None else found.answer


def peek_answer(
    endpoint: str, body: Any, part: Any, rows: tuple[int, ...], usage: ModelUsage, usable: Callable[[Any], bool]
) -> Any | None:
    """The usable answer stored for this request for ``rows`` (counted as a hit), else
    None: ``cache_slot(...).get(...)`` with the rows said directly, for the built-in
    generators' synchronous peek (a cached rerun's hot path: no slot is made)."""
    scope = peek_scope(rows)
    return None if scope is None else peek_in(scope, endpoint, body, part, rows, usage, usable)


def may_hold(rows: Sequence[int]) -> bool:
    """Whether the run's cache may hold answers of this column for ``rows``: False with no
    run cache, outside a column, or when the column's bulk lookup (made now if it was not
    yet) found nothing for the batch's rows and ``rows`` are all among them (a first run:
    then a peek builds no request and makes no key)."""
    batch, column = _batch.get(), _column.get()
    if batch is None or column is None or not rows:
        return False
    covered = column.rows
    if not covered.isdisjoint(rows) and not column.found_any(batch.cache):
        return not covered.issuperset(rows)
    return True


def peek_many(
    endpoint: str,
    body: Any,
    prompts: Sequence[tuple[str, str | None] | None],
    rows: Sequence[int],
    usage: ModelUsage,
    usable: Callable[[Any], bool],
) -> list[Any | None] | None:
    """``peek_answer`` for a batch of chat requests that differ only in their messages,
    each for one row: ``chat_messages(*prompts[i])`` for row ``rows[i]`` (None: nothing to
    ask for that row). The usable stored answers (each counted as a hit, as
    ``peek_answer`` counts it), None for a miss; None in place of the whole list when no
    answer can be stored for these rows (``may_hold``: a first run makes no key). A cached
    rerun's hot path: the key template, the bulk lookup and the accounting are found
    once; each row costs its key and a dict lookup."""
    if not may_hold(rows):
        return None
    batch, column = _batch.get(), _column.get()
    assert batch is not None and column is not None  # may_hold said so
    cache, covered = batch.cache, column.rows
    keys = column.template(endpoint, body, batch.seed).chat_keys(prompts, rows)
    if covered.issuperset(rows):  # the column's bulk lookup covers them: dict lookups
        found = cache.served(column.found or {}, keys, usable)
        answers = found.answers
        if found.unusable:
            _warn_unusable(cache)
        if found.hits:
            _count_hits(batch, usage, found.hits, found.prompt_tokens, found.completion_tokens)
        return answers
    # Rows the column's bulk lookup did not cover (a plugin's own choice): one query each.
    return [
        None
        if key is None
        else (found_one.answer if (found_one := _stored_answer(batch, column, row, key, usage, usable)) else None)
        for key, row in zip(keys, rows, strict=True)
    ]


def _warn_unusable(cache: ResponseCache) -> None:
    cache.warn_once(
        "shape",
        f"ignoring response cache entries of the wrong shape in {cache.path} (they fail the checks "
        "of a fresh answer: empty text, a vector count, a non-finite value, dimensions); asked again",
    )


def _count_hits(batch: BatchScope, usage: ModelUsage, hits: int, prompt_tokens: int, completion_tokens: int) -> None:
    """Answers served by the cache: what they saved, priced apart (``saved_by_cache_usd``)."""
    batch.hits += hits
    batch.cache.hits += hits
    usage.cached += hits
    usage.saved_tokens += prompt_tokens + completion_tokens
    usage.saved_prompt_tokens += prompt_tokens
    usage.saved_completion_tokens += completion_tokens


def _stored_answer(
    batch: BatchScope,
    column: ColumnScope,
    first_row: int,
    key: str,
    usage: ModelUsage,
    usable: Callable[[Any], bool],
) -> CachedAnswer | None:
    """The answer stored under ``key``, counted as a hit; None (a miss) when there is none
    or when it fails the checks a fresh answer of this request passes (a damaged or stale
    entry: one warning per run, then the fresh answer replaces it)."""
    cache = batch.cache
    if first_row in column.rows:  # the column's bulk lookup covers it: a dict lookup
        stored = column.stored(cache, key)
        found = None if stored is None else cache.decode(stored)
    else:  # rows the column's bulk lookup did not cover (a plugin's own choice)
        found = cache.get(column.name, first_row, key)
    if found is None:
        return None
    if not usable(found.answer):
        _warn_unusable(cache)
        return None
    _count_hits(batch, usage, 1, found.prompt_tokens, found.completion_tokens)
    return found


def current_rows() -> tuple[int, ...]:
    """The rows the running request is for (empty outside a row block): the ledger
    records them beside what the answer cost."""
    row = _row.get()
    return () if row is None else row.rows


def current_column() -> str | None:
    """The column whose generator is running (None outside one): part of the identity of
    a request no row was said for (batch mode's request ids)."""
    column = _column.get()
    return None if column is None else column.name


# A header whose lower-cased name contains one of these is a credential: it says who pays,
# not what is answered, so it is left out of the cache key (Authorization,
# Proxy-Authorization, api-key, x-api-key, X-Auth-Token, Cookie, X-Client-Secret...).
CREDENTIAL_WORDS = ("auth", "key", "token", "secret", "cookie", "password", "credential", "signature")


def is_credential_header(name: str) -> bool:
    lowered = name.lower()
    return any(word in lowered for word in CREDENTIAL_WORDS)


def endpoint_id(kind: str, base_url: str, headers: Mapping[str, str] | None = None) -> str:
    """An endpoint's identity for the cache key: kind, URL and a sha256 of the headers
    that are not credentials (names case-insensitive, order-free). Never the API key and
    never a header value in clear: a changed deployment or organisation header asks again,
    a rotated key keeps the cache."""
    kept = sorted((name.lower(), value) for name, value in (headers or {}).items() if not is_credential_header(name))
    digest = hashlib.sha256(json.dumps(kept, ensure_ascii=False).encode("utf-8", "surrogatepass")).hexdigest()
    return json.dumps([kind, base_url, digest])


def is_text(answer: Any) -> bool:
    """Whether a stored chat answer passes a fresh one's check: non-blank text."""
    return isinstance(answer, str) and answer != "" and not answer.isspace()


_NUMBERS: frozenset[type] = frozenset({float, int})


def vectors_problem(answer: Any, count: int, dimensions: int | None = None) -> str | None:
    """What is wrong with an embedding answer, or None: ``count`` non-empty lists of finite
    numbers, all of one length, ``dimensions`` long when that is set. The one check every
    embedding answer passes, fresh (before anything uses or caches it) or stored; an answer
    held as a matrix (``vectors``) is checked by ``matrix_problem``, in numpy."""
    if is_matrix(answer):
        return matrix_problem(answer, count, dimensions)
    if not isinstance(answer, list) or len(answer) != count:
        got = len(answer) if isinstance(answer, list) else type(answer).__name__
        return f"has {got} vectors for {count} inputs"
    length = dimensions
    for position, vector in enumerate(answer):
        if not isinstance(vector, list) or not vector:
            return f"data[{position}].embedding is empty or not a list"
        if length is None:
            length = len(vector)
        elif len(vector) != length:
            expected = "dimensions is set to" if dimensions is not None else "data[0] has"
            return f"data[{position}].embedding has {len(vector)} dimensions, but {expected} {length}"
        if not set(map(type, vector)) <= _NUMBERS:  # exact types: a bool is no component
            return f"data[{position}].embedding holds a value that is not a number"
        if not math.isfinite(sum(vector)):  # one C loop: NaN and inf carry through to the sum
            bad = next((x for x in vector if not math.isfinite(x)), None)
            if bad is not None:  # else only the sum of huge finite values overflowed
                return f"data[{position}].embedding holds {bad!r} (NaN or infinity)"
    return None


def are_vectors(answer: Any, count: int, dimensions: int | None = None) -> bool:
    """Whether a stored embedding answer passes a fresh one's checks (``vectors_problem``)."""
    return vectors_problem(answer, count, dimensions) is None
