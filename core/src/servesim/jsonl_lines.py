"""JSONL lines of the built-in sinks, formatted directly.

Each function returns exactly ``json.dumps(record, allow_nan=False) + "\\n"`` for the record
that :func:`servesim.sinks_builtin.kv_event_record` / :func:`~servesim.sinks_builtin.fpm_record`
build (tests/core/test_jsonl_lines.py checks them against each other), without building the
dict or walking it in ``json``'s encoder: sinks write one line per event on the replay's hot
path. ``json`` writes ints and finite floats with their ``repr``; a NaN or infinity is a
``ValueError``, as ``allow_nan=False`` makes it. Times are annotated ``Any``, not ``float``:
an int time is written as an int, and the compiled build (mypyc, which turns an int passed
as a ``float`` into one) must keep it one.

Long lists of numbers (a run's pass ends and durations, a ``Stored`` event's hashes) are
turned into text by one msgspec encode each rather than one ``repr`` a number, and so is a
lone float (a batch's time, a pass's wall time). msgspec writes an int as ``repr`` does, and
a float with the same shortest round-trip digits in the same positional notation for zero
and magnitudes in :data:`POSITIONAL`. Outside it Python writes ``1e-05`` and ``1e+16`` where
msgspec writes ``0.00001`` and ``1e16``, so such floats, and lists holding one, keep
``repr`` (tests/core/test_jsonl_numbers.py pins both sides of each end).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any
from itertools import repeat
from operator import attrgetter, truediv

from msgspec.json import Encoder

from servesim.contract import ClearedBlocks, ForwardPassMetrics, KvEvent, RemovedBlocks, StoredBlocks
from servesim.fpm_schema import FPM_VERSION
from servesim.fpm_runs import FpmRun
from servesim.kv.event_records import RemovedRun, StoredRun

_BLOCK_HASH = attrgetter("block_hash")
_TOKENS_HASH = attrgetter("tokens_hash")
_TOKEN_IDS = attrgetter("token_ids")


#: Magnitudes whose float text ``repr`` writes in positional notation, as msgspec does.
POSITIONAL = (1e-4, 1e16)
_LOW, _HIGH = POSITIONAL
#: Lists at least this long are encoded by msgspec (shorter ones cost more to encode than to
#: ``repr``).
MIN_ENCODED = 3
_encode = Encoder().encode


def _float(x: Any) -> str:
    x = float(x)
    if _LOW <= x < _HIGH or -_HIGH < x <= -_LOW:  # msgspec writes it as repr does, quicker
        return _encode(x).decode()
    if x - x != 0.0:
        raise ValueError(f"Out of range float values are not JSON compliant: {x!r}")
    return repr(x)


def _num(x: Any) -> str:
    """``json`` text of an int or a float, whichever ``x`` is."""
    return repr(x) if type(x) is int else _float(x)


def number_texts(values: Sequence[Any]) -> Sequence[Any]:
    """The text of each finite int or float of ``values`` as ``json`` writes it, or ``values``
    itself where that is quicker (``%s`` of an int or a float is that text too): one msgspec
    encode of the list, cut at its commas, when every float's text is msgspec's as well."""
    if len(values) < MIN_ENCODED:
        return values
    lo, hi = min(values), max(values)
    if not (_LOW <= lo and hi < _HIGH):
        if lo <= -_HIGH or hi >= _HIGH:
            return values
        for x in values:
            if x and not _LOW <= abs(x):
                return values
    try:
        return _encode(values).decode()[1:-1].split(",")
    except (OverflowError, TypeError):  # a value this msgspec release cannot encode
        return values


def _ints(values: object) -> str:
    return ", ".join(map(str, values))  # type: ignore[call-overload]


#: One FPM line: ``%d`` of an int is its ``str`` and ``%r`` of a float its ``repr``, as ``json``
#: writes them; the wall time is its text (``_float``).
_FPM_LINE = (
    f'{{"version": {FPM_VERSION}, "worker_id": "%d", "dp_rank": %d, "counter_id": %d, '
    '"wall_time": %s, "scheduled_requests": {"num_prefill_requests": %d, '
    '"sum_prefill_tokens": %d, "var_prefill_length": %r, "sum_prefill_kv_tokens": %d, '
    '"num_decode_requests": %d, "sum_decode_kv_tokens": %d, "var_decode_kv_tokens": %r}, '
    '"queued_requests": {"num_prefill_requests": %d, "sum_prefill_tokens": %d, '
    '"var_prefill_length": %r, "num_decode_requests": %d, "sum_decode_kv_tokens": %d, '
    '"var_decode_kv_tokens": %r}, "at_ms": %s}\n'
)


def fpm_line(worker_id: int, at_ms: Any, m: ForwardPassMetrics) -> str:
    wall = float(m.duration_ms) / 1000.0
    v1, v2 = float(m.var_prefill_length), float(m.var_decode_kv_tokens)
    v3, v4 = float(m.var_queued_prefill_length), float(m.var_queued_decode_kv_tokens)
    total = wall + v1 + v2 + v3 + v4
    if total - total != 0.0:  # some value is not finite (or the sum overflowed): find which
        for x in (wall, v1, v2, v3, v4):
            _float(x)
    return _FPM_LINE % (
        worker_id, m.dp_rank, m.counter_id, _float(wall), m.num_prefill_requests,
        m.sum_prefill_tokens, v1, m.sum_prefill_kv_tokens, m.num_decode_requests,
        m.sum_decode_kv_tokens, v2,
        m.num_queued_prefill, m.sum_queued_prefill_tokens, v3, m.num_queued_decode,
        m.sum_queued_decode_kv_tokens, v4, _num(at_ms),
    )


#: The lines of a run (:class:`~servesim.fpm_runs.FpmRun`): the run's constants filled in once
#: (the doubled ``%%`` stay as the five per-pass values and ``at_ms``), then one fill a pass.
#: The per-pass floats are ``%s``: a float's ``str`` is its ``repr`` (an int's too), so a fill
#: takes either the number or its text (:func:`number_texts`); a run whose passes share one
#: decode variance passes its text, formatted once.
_FPM_RUN_LINE = (
    '{"version": %d, "worker_id": "%d", "dp_rank": %d, "counter_id": %%d, '
    '"wall_time": %%s, "scheduled_requests": {"num_prefill_requests": %d, '
    '"sum_prefill_tokens": %d, "var_prefill_length": %r, "sum_prefill_kv_tokens": %d, '
    '"num_decode_requests": %%d, "sum_decode_kv_tokens": %%d, "var_decode_kv_tokens": %%s}, '
    '"queued_requests": {"num_prefill_requests": %d, "sum_prefill_tokens": %d, '
    '"var_prefill_length": %r, "num_decode_requests": %d, "sum_decode_kv_tokens": %d, '
    '"var_decode_kv_tokens": %r}, "at_ms": %%s}\n'
)


#: Filled run templates by the run's constants (``_run_template``), cleared when full.
_RUN_TEMPLATES: dict[tuple[Any, ...], str] = {}
#: Per worker id: the last run's ``base`` (held, so its id is not reused) and its template.
_LAST_TEMPLATE: dict[int, tuple[dict[str, Any], str]] = {}


def _run_template(worker_id: int, b: dict[str, Any]) -> str:
    """:data:`_FPM_RUN_LINE` filled with a run's constants. Runs of one rank share them
    while its queues stay put, so the filled templates are kept by those values (a zero
    float is keyed by its text, which tells ``-0.0`` from ``0.0``; a NaN never matches and
    so always reaches the check below). A rank hands the same ``base`` to its runs while
    their constants hold (``FpmRun.base`` is never changed once built), so the worker's
    last one is looked up first, by identity."""
    last = _LAST_TEMPLATE.get(worker_id)
    if last is not None and last[0] is b:
        return last[1]
    v1, v2, v3 = (float(b["var_prefill_length"]), float(b["var_queued_prefill_length"]),
                  float(b["var_queued_decode_kv_tokens"]))
    key = (worker_id, b["dp_rank"], b["num_prefill_requests"], b["sum_prefill_tokens"],
           v1 if v1 else repr(v1), b["sum_prefill_kv_tokens"], b["num_queued_prefill"],
           b["sum_queued_prefill_tokens"], v2 if v2 else repr(v2), b["num_queued_decode"],
           b["sum_queued_decode_kv_tokens"], v3 if v3 else repr(v3))
    tpl = _RUN_TEMPLATES.get(key)
    if tpl is None:
        for x in (v1, v2, v3):
            _float(x)
        tpl = _FPM_RUN_LINE % (
            FPM_VERSION, worker_id, b["dp_rank"], b["num_prefill_requests"],
            b["sum_prefill_tokens"], v1, b["sum_prefill_kv_tokens"], b["num_queued_prefill"],
            b["sum_queued_prefill_tokens"], v2, b["num_queued_decode"],
            b["sum_queued_decode_kv_tokens"], v3,
        )
        if len(_RUN_TEMPLATES) >= 4096:
            _RUN_TEMPLATES.clear()
        _RUN_TEMPLATES[key] = tpl
    if len(_LAST_TEMPLATE) >= 4096:
        _LAST_TEMPLATE.clear()
    _LAST_TEMPLATE[worker_id] = (b, tpl)
    return tpl


_NUMBER_TYPES = frozenset((float, int))


def fpm_run_lines(worker_id: int, ats: Sequence[Any], run: FpmRun) -> list[str]:
    """``[fpm_line(worker_id, ats[j], run[j]) for j in range(len(run))]``, without building
    the objects: the run's constants are formatted once into a template, and each pass's
    line is one ``%`` fill of it from the columns zipped, all at C level (``map``)."""
    tpl = _run_template(worker_id, run.base)
    durations = run.durations
    n = len(durations)
    var_decode = run.var_decode
    if not (len(ats) == len(run.num_decode) == len(run.sum_decode_kv) == len(var_decode) == n):
        raise ValueError(f"a run of {n} passes with {len(ats)} ends or columns of other lengths")
    c0 = run.counter0
    if n == 1:  # a third of the runs: the general path's set-up would cost more than the line
        wall = float(durations[0]) / 1000.0
        v = float(var_decode[0])
        at = ats[0]
        if type(at) is not int and type(at) is not float:
            at = float(at)
        t = wall + v + at
        if t - t != 0.0:
            for x in (wall, v, at):
                _num(x)
        return [tpl % (c0, _float(wall), run.num_decode[0], run.sum_decode_kv[0], v, _num(at))]
    walls = list(map(truediv, map(float, durations), repeat(1000.0)))
    variances = list(map(float, var_decode))
    # ``%s`` of an int or a float is what ``_num`` writes; anything else becomes a float first.
    if not _NUMBER_TYPES.issuperset(map(type, ats)):
        ats = [a if type(a) is int else float(a) for a in ats]
    total = sum(walls) + sum(variances) + sum(ats)
    if total - total != 0.0:  # some value is not finite (or the sum overflowed): find which
        for x in (*walls, *variances, *ats):
            _num(x)
    v0 = variances[0] if n else 0.0
    # One variance for every pass (equal non-zero floats have one text; a zero's sign shows
    # in its text, so zeros are written one by one): formatted once.
    vs: Any = (repeat(repr(v0), n) if v0 and variances.count(v0) == n
               else number_texts(variances))
    return list(map(tpl.__mod__, zip(range(c0, c0 + n), number_texts(walls), run.num_decode,
                                     run.sum_decode_kv, vs, number_texts(ats))))


#: A one-hash ``Removed`` line after its head: the event id and the hash, each its ``str`` as
#: ``%s`` writes it (what ``json`` writes for an int).
_REMOVED_LINE = '%s, "type": "BlockRemoved", "block_hashes": [%s]}\n'
_REMOVED_MID = ', "type": "BlockRemoved", "block_hashes": ['
_REMOVED_TAIL = "]}\n"

#: Per ``(worker_id, dp_rank)``: the head of its lines up to ``event_id`` and the templates of
#: a one-record ``Removed`` / ``Stored`` line, each with ``at_ms`` as its first ``%s`` (the
#: batch's time is the only part of the head that changes).
_TEMPLATES: dict[tuple[int, int], tuple[str, str, str]] = {}


def _templates(worker_id: int, dp: int) -> tuple[str, str, str]:
    key = (worker_id, dp)
    t = _TEMPLATES.get(key)
    if t is None:
        head = f'{{"worker": {worker_id}, "dp_rank": {dp}, "at_ms": '.replace("%", "%%")
        head += '%s, "event_id": '
        t = (head, head + '%s, "type": "BlockRemoved", "block_hashes": [%s]}\n',
             head + ('%s, "type": "BlockStored", "block_hashes": [%s], "parent_block_hash": %s, '
                     '"tokens_hashes": [%s]}\n'))
        if len(_TEMPLATES) < 65536:
            _TEMPLATES[key] = t
    return t


def _head(worker_id: int, dp: int, at_ms: Any) -> str:
    return f'{{"worker": {worker_id}, "dp_rank": {dp}, "at_ms": {_num(at_ms)}, "event_id": '


def _removed_run(head: str, rec: RemovedRun) -> str:
    """The lines of ``len(rec.hashes)`` one-hash ``Removed`` events: ``head ID MID HASH TAIL``
    each, as one ``%`` fill of the line's template repeated once a hash, with the ids and
    hashes interleaved by slice assignment."""
    first = rec.event_id
    hashes = rec.hashes
    n = len(hashes)
    if "%" in head:  # never from _templates (ints and a number's text), but stay exact
        pairs = zip(map(str, range(first, first + n)), map(str, hashes))
        return head + (_REMOVED_TAIL + head).join(map(_REMOVED_MID.join, pairs)) + _REMOVED_TAIL
    values: list[int] = [0] * (2 * n)
    values[0::2] = range(first, first + n)
    values[1::2] = hashes
    return ((head + _REMOVED_LINE) * n) % tuple(values)


def _int_list(values: Sequence[int]) -> str:
    """``json`` text of a list of ints: a long one's from msgspec's compact text with the
    separators widened (its only commas are between the numbers), a short list's ``repr``
    (exactly that text too); other sequences are joined."""
    if type(values) is list:
        if len(values) >= MIN_ENCODED:
            try:
                return _encode(values).decode().replace(",", ", ")
            except (OverflowError, TypeError):  # a value this msgspec release cannot encode
                pass
        return repr(values)
    return "[" + ", ".join(map(str, values)) + "]"


def _stored_run(head: str, rec: StoredRun) -> str:
    parent = rec.parent_hash
    return "".join((head, str(rec.event_id), ', "type": "BlockStored", "block_hashes": ',
                    _int_list(rec.hashes), ', "parent_block_hash": ',
                    "null" if parent is None else str(parent), ', "tokens_hashes": ',
                    _int_list(rec.tokens_hashes), "}\n"))


def _record_line(rec: Any, te: type, dp: int, at: str, templates: tuple[str, str, str],
                 worker_id: int) -> str:
    """The lines of one compact record (``te``: its type) of a batch whose first rank is
    ``dp``, at ``at`` (the batch's time as text)."""
    hs = rec.hashes
    if rec.dp_rank != dp:
        templates = _templates(worker_id, rec.dp_rank)
    if len(hs) == 1:  # one template fill (decode, evictions)
        if te is StoredRun:
            parent = rec.parent_hash
            return templates[2] % (at, rec.event_id, hs[0], "null" if parent is None else parent,
                                   rec.tokens_hashes[0])
        return templates[1] % (at, rec.event_id, hs[0])
    if te is StoredRun:
        return _stored_run(templates[0] % at, rec)
    return _removed_run(templates[0] % at, rec) if hs else ""


def kv_event_lines(worker_id: int, at_ms: Any, events: Sequence[Any]) -> str:
    """The lines of one published batch: device-tier ``Removed`` and ``Stored`` events fill a
    template of their worker and rank (``%`` formatting of an int is its ``str``, as ``json``
    writes it); compact records (servesim.kv.event_records) are formatted with C-level joins
    or one template fill; any other event goes through :func:`kv_event_line`."""
    if not events:
        return ""
    dp = events[0].dp_rank
    at = (_encode(at_ms).decode() if type(at_ms) is float and _LOW <= at_ms < _HIGH
          else _num(at_ms))
    templates = _templates(worker_id, dp)
    if len(events) == 1:
        e = events[0]
        te: type = type(e)
        if te is RemovedRun or te is StoredRun:
            return _record_line(e, te, dp, at, templates, worker_id)
    removed, stored1 = templates[1], templates[2]
    out: list[str] = []
    append = out.append
    for e in events:
        te = type(e)
        if te is RemovedRun or te is StoredRun:
            rec: Any = e
            hs = rec.hashes
            if rec.dp_rank == dp and len(hs) == 1:  # one template fill (decode, evictions)
                if te is StoredRun:
                    parent = rec.parent_hash
                    append(stored1 % (at, rec.event_id, hs[0],
                                      "null" if parent is None else parent, rec.tokens_hashes[0]))
                else:
                    append(removed % (at, rec.event_id, hs[0]))
                continue
            append(_record_line(rec, te, dp, at, templates, worker_id))
            continue
        ev: KvEvent = e
        data = ev.data
        t = type(data)
        if ev.dp_rank != dp:
            append(kv_event_line(worker_id, at_ms, ev))
        elif t is RemovedBlocks and data.medium is None:  # type: ignore[union-attr]
            hashes = data.block_hashes  # type: ignore[union-attr]
            append(removed % (at, e.event_id,
                              hashes[0] if len(hashes) == 1 else ", ".join(map(str, hashes))))
        elif (t is StoredBlocks and data.medium is None  # type: ignore[union-attr]
              and data.start_position is None):  # type: ignore[union-attr]
            blocks = data.blocks  # type: ignore[union-attr]
            parent = data.parent_hash  # type: ignore[union-attr]
            p = "null" if parent is None else parent
            if len(blocks) == 1 and blocks[0].token_ids is None:
                b = blocks[0]
                append(stored1 % (at, e.event_id, b.block_hash, p, b.tokens_hash))
            elif blocks and None not in map(_TOKEN_IDS, blocks):
                append(kv_event_line(worker_id, at_ms, e))
            else:
                append(stored1 % (at, e.event_id, ", ".join(map(str, map(_BLOCK_HASH, blocks))), p,
                                  ", ".join(map(str, map(_TOKENS_HASH, blocks)))))
        else:
            append(kv_event_line(worker_id, at_ms, e))
    return "".join(out)


def kv_event_line(worker_id: int, at_ms: Any, event: KvEvent) -> str:
    head = (f'{{"worker": {worker_id}, "dp_rank": {event.dp_rank}, "at_ms": {_num(at_ms)}, '
            f'"event_id": {event.event_id}, ')
    data = event.data
    if isinstance(data, StoredBlocks):
        blocks = data.blocks
        parent = "null" if data.parent_hash is None else str(data.parent_hash)
        text = (f'"type": "BlockStored", "block_hashes": [{_ints(b.block_hash for b in blocks)}], '
                f'"parent_block_hash": {parent}, '
                f'"tokens_hashes": [{_ints(b.tokens_hash for b in blocks)}]')
        if blocks and all(b.token_ids is not None for b in blocks):
            ids = _ints(t for b in blocks for t in b.token_ids)  # type: ignore[union-attr]
            text += f', "token_ids": [{ids}]'
        if data.start_position is not None:
            text += f', "start_position": {data.start_position}'
        if data.medium is not None:
            text += f', "medium": "{data.medium}"'
        return head + text + "}\n"
    if isinstance(data, RemovedBlocks):
        medium = "" if data.medium is None else f', "medium": "{data.medium}"'
        return head + f'"type": "BlockRemoved", "block_hashes": [{_ints(data.block_hashes)}]{medium}}}\n'
    if isinstance(data, ClearedBlocks):
        return head + '"type": "AllBlocksCleared"}\n'
    raise TypeError(f"unknown KV event data {type(data).__name__}")


__all__ = ["fpm_line", "fpm_run_lines", "kv_event_line", "kv_event_lines"]
