"""JSONL lines of the built-in sinks, formatted directly.

Each function returns exactly ``json.dumps(record, allow_nan=False) + "\\n"`` for the record
that :func:`servesim.sinks.builtin.kv_event_record` / :func:`~servesim.sinks.builtin.fpm_record`
build (tests/core/test_jsonl_lines.py checks them against each other), without building the
dict or walking it in ``json``'s encoder: sinks write one line per event on the replay's hot
path. ``json`` writes ints and finite floats with their ``repr``; a NaN or infinity is a
``ValueError``, as ``allow_nan=False`` makes it. Times are annotated ``Any``, not ``float``:
an int time is written as an int, and the compiled build (mypyc, which turns an int passed
as a ``float`` into one) must keep it one.

Numbers are mostly turned into text by msgspec, many to one encode: a run's per-pass values,
a ``Stored`` event's hash lists, an eviction's event ids and hashes, a lone float (a batch's
time, a pass's wall time). The texts are then joined between fixed pieces of the line rather
than ``%`` filled into a template, which scans the template a character at a time. msgspec
writes an int as ``repr`` does, and a float with the same shortest round-trip digits in the
same positional notation for zero and magnitudes in :data:`POSITIONAL`. Outside it Python
writes ``1e-05`` and ``1e+16`` where msgspec writes ``0.00001`` and ``1e16``, so such floats,
and lists holding one, keep ``repr`` (tests/core/test_jsonl_numbers.py pins both sides of each
end).
"""

from __future__ import annotations

import json
import re
from collections.abc import Sequence
from itertools import repeat
from operator import attrgetter, truediv
from typing import Any

from msgspec.json import Encoder

from servesim.contract import ClearedBlocks, ForwardPassMetrics, KvEvent, RemovedBlocks, StoredBlocks
from servesim.kv.event_records import RemovedRun, StoredRun
from servesim.sinks.fpm_columns import FpmColumns
from servesim.sinks.fpm_schema import FPM_VERSION

_BLOCK_HASH = attrgetter("block_hash")
_TOKENS_HASH = attrgetter("tokens_hash")
_TOKEN_IDS = attrgetter("token_ids")


#: Magnitudes whose float text ``repr`` writes in positional notation, as msgspec does.
POSITIONAL = (1e-4, 1e16)
_LOW, _HIGH = POSITIONAL
#: Lists of ints at least this long are encoded by msgspec (shorter ones cost more to encode
#: than to ``repr``).
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


def _positional(values: Sequence[Any]) -> bool:
    """Whether msgspec writes every float of ``values`` (finite ints and floats) as ``repr``
    does: each is zero or has a magnitude in :data:`POSITIONAL`."""
    lo, hi = min(values), max(values)
    if _LOW <= lo and hi < _HIGH:
        return True
    if lo <= -_HIGH or hi >= _HIGH:
        return False
    if lo == hi == 0.0:  # zeros only (variances, mostly)
        return True
    return all(not x or _LOW <= abs(x) for x in values)


def _encode_texts(values: list[Any]) -> list[str]:
    """The texts of ``values`` (finite ints, and floats msgspec writes as ``repr`` does) from
    one msgspec encode cut at its commas, or each one's ``str``."""
    try:
        return _encode(values).decode()[1:-1].split(",")
    except (OverflowError, TypeError):  # a value this msgspec release cannot encode
        return list(map(str, values))


def _texts(values: list[Any]) -> list[str]:
    """The ``json`` text of each of ``values`` (finite floats and ints): one msgspec encode cut
    at its commas when msgspec writes every float as ``repr`` does, else each one's ``str``
    (a float's is its ``repr``). A float's ``repr`` alone costs several msgspec encodes."""
    return _encode_texts(values) if _positional(values) else list(map(str, values))


#: The lines of a run (:class:`~servesim.sinks.fpm_columns.FpmColumns`): the run's constants filled in once
#: (the doubled ``%%`` stay as the five per-pass values and ``at_ms``); a pass's line is then
#: the template's seven pieces with the pass's six texts between them (:func:`fpm_run_lines`),
#: or one ``%`` fill of it for a run of one pass (a float's ``str`` is its ``repr``).
_FPM_RUN_LINE = (
    '{"version": %d, "worker_id": "%d", "dp_rank": %d, "counter_id": %%d, '
    '"wall_time": %%s, "scheduled_requests": {"num_prefill_requests": %d, '
    '"sum_prefill_tokens": %d, "var_prefill_length": %r, "sum_prefill_kv_tokens": %d, '
    '"num_decode_requests": %%d, "sum_decode_kv_tokens": %%d, "var_decode_kv_tokens": %%s}, '
    '"queued_requests": {"num_prefill_requests": %d, "sum_prefill_tokens": %d, '
    '"var_prefill_length": %r, "num_decode_requests": %d, "sum_decode_kv_tokens": %d, '
    '"var_decode_kv_tokens": %r}, "at_ms": %%s}\n'
)
#: The per-pass fields of a filled run template, in order.
_RUN_SPEC = re.compile("%[ds]")
#: A pass's line in pieces: the template's literal text at the even places (13 in all).
_PASS_PARTS = 13

#: Filled run templates (the template and its pieces) by the run's constants
#: (``_run_template``), cleared when full.
_RUN_TEMPLATES: dict[tuple[Any, ...], tuple[str, list[Any]]] = {}
#: Per worker id: the last run's ``base`` (held, so its id is not reused) and its template.
_LAST_TEMPLATE: dict[int, tuple[dict[str, Any], tuple[str, list[Any]]]] = {}


def _run_template(worker_id: int, b: dict[str, Any]) -> tuple[str, list[Any]]:
    """:data:`_FPM_RUN_LINE` filled with a run's constants, and its pieces (the literal texts
    at the even places of a 13-item list, ``None`` where a pass's values go). Runs of one rank
    share them while its queues stay put, so the filled templates are kept by those values (a
    zero float is keyed by its text, which tells ``-0.0`` from ``0.0``; a NaN never matches
    and so always reaches the check below). A rank hands the same ``base`` to its runs while
    their constants hold (``FpmColumns.base`` is never changed once built), so the worker's
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
    filled = _RUN_TEMPLATES.get(key)
    if filled is None:
        for x in (v1, v2, v3):
            _float(x)
        tpl = _FPM_RUN_LINE % (
            FPM_VERSION, worker_id, b["dp_rank"], b["num_prefill_requests"],
            b["sum_prefill_tokens"], v1, b["sum_prefill_kv_tokens"], b["num_queued_prefill"],
            b["sum_queued_prefill_tokens"], v2, b["num_queued_decode"],
            b["sum_queued_decode_kv_tokens"], v3,
        )
        # The constants are ints and float texts: the only ``%`` left are the six specs.
        parts: list[Any] = [None] * _PASS_PARTS
        parts[0::2] = _RUN_SPEC.split(tpl)
        filled = (tpl, parts)
        if len(_RUN_TEMPLATES) >= 4096:
            _RUN_TEMPLATES.clear()
        _RUN_TEMPLATES[key] = filled
    if len(_LAST_TEMPLATE) >= 4096:
        _LAST_TEMPLATE.clear()
    _LAST_TEMPLATE[worker_id] = (b, filled)
    return filled


_NUMBER_TYPES = frozenset((float, int))


def fpm_run_lines(worker_id: int, ats: Sequence[Any], run: FpmColumns) -> list[str]:
    """``[fpm_line(worker_id, ats[j], run[j]) for j in range(len(run))]``, without building
    the objects: the run's constants are formatted once into a template. A run of several
    passes takes the texts of all its per-pass values from one msgspec encode (when msgspec
    writes its floats as ``repr`` does), slice-assigns them between the repeated pieces of
    the template and joins each pass's thirteen, all at C level; neither ``%`` formatting,
    which scans the template a character at a time, nor one conversion call per number."""
    tpl, pattern = _run_template(worker_id, run.base)
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
        if type(at) is not int:
            at = float(at)
        t = wall + v + at if type(at) is float else wall + v
        if t - t != 0.0:
            for x in (wall, v, at):
                _num(x)
        texts = _texts([wall, v, at])
        return [tpl % (c0, texts[0], run.num_decode[0], run.sum_decode_kv[0], texts[1], texts[2])]
    if not n:
        return []
    walls = list(map(truediv, map(float, durations), repeat(1000.0)))
    variances = list(map(float, var_decode))
    # Each at is written as an int or a float, whichever it is; anything else becomes a float.
    if not _NUMBER_TYPES.issuperset(map(type, ats)):
        ats = [a if type(a) is int else float(a) for a in ats]
    total = sum(walls) + sum(variances) + sum(ats)
    if total - total != 0.0:  # some value is not finite (or the sum overflowed): find which
        for x in (*walls, *variances, *ats):
            _num(x)
    v0 = variances[0]
    # One variance for every pass (equal non-zero floats have one text; a zero's sign shows
    # in its text, so zeros are written one by one): formatted once.
    one_var = v0 != 0.0 and variances.count(v0) == n
    # ``%d`` writes ``int(x)``, as the record does: the int columns are made ints.
    values: list[Any] = [*range(c0, c0 + n), *walls, *map(int, run.num_decode),
                         *map(int, run.sum_decode_kv), *ats]
    if one_var:
        values.append(v0)
    else:
        values += variances
    texts = (_encode_texts(values) if _positional(walls) and _positional(ats)
             and _positional(variances) else list(map(str, values)))
    parts = pattern * n
    parts[1::_PASS_PARTS] = texts[:n]
    parts[3::_PASS_PARTS] = texts[n:2 * n]
    parts[5::_PASS_PARTS] = texts[2 * n:3 * n]
    parts[7::_PASS_PARTS] = texts[3 * n:4 * n]
    parts[9::_PASS_PARTS] = texts[5 * n:] * n if one_var else texts[5 * n:]
    parts[11::_PASS_PARTS] = texts[4 * n:5 * n]
    return list(map("".join, zip(*[iter(parts)] * _PASS_PARTS)))


#: A one-hash ``Removed`` line after its head: the event id, this, the hash, then the tail.
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
    """The lines of ``len(rec.hashes)`` one-hash ``Removed`` events, ``head ID MID HASH TAIL``
    each: the ids' and the hashes' texts (one msgspec encode each, cut at its commas) are
    slice-assigned between the repeated pieces and the whole joined once. Neither ``%``
    formatting, which scans the literal text a character at a time, nor one ``str`` per int."""
    first = rec.event_id
    hashes = rec.hashes
    n = len(hashes)
    if not n:
        return ""
    parts: list[Any] = [_REMOVED_TAIL + head, None, _REMOVED_MID, None] * n
    parts[0] = head
    parts[1::4] = _encode_texts(list(range(first, first + n)))
    parts[3::4] = _encode_texts(hashes)
    parts.append(_REMOVED_TAIL)
    return "".join(parts)


def _int_list(values: Sequence[int]) -> str:
    """``json`` text of a list of ints: a long one's from msgspec's compact text with the
    separators widened (its only commas are between the numbers; in its bytes, which
    ``bytes.replace`` widens in half the time ``str.replace`` takes), a short list's ``repr``
    (exactly that text too); other sequences are joined."""
    if type(values) is list:
        if len(values) >= MIN_ENCODED:
            try:
                return _encode(values).replace(b",", b", ").decode()
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
              and data.start_position is None and data.lora_id is None):  # type: ignore[union-attr]
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
        if data.lora_id is not None:
            name = "null" if data.lora_name is None else json.dumps(data.lora_name)
            text += f', "lora_id": {data.lora_id}, "lora_name": {name}'
        return head + text + "}\n"
    if isinstance(data, RemovedBlocks):
        medium = "" if data.medium is None else f', "medium": "{data.medium}"'
        return head + f'"type": "BlockRemoved", "block_hashes": [{_ints(data.block_hashes)}]{medium}}}\n'
    if isinstance(data, ClearedBlocks):
        return head + '"type": "AllBlocksCleared"}\n'
    raise TypeError(f"unknown KV event data {type(data).__name__}")


__all__ = ["fpm_line", "fpm_run_lines", "kv_event_line", "kv_event_lines"]
