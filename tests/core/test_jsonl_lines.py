"""servesim.sinks.jsonl_lines formats exactly what json.dumps gives for the sinks' records."""

from __future__ import annotations

import json

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from servesim.contract import (
    ClearedBlocks,
    ForwardPassMetrics,
    KvBlock,
    KvEvent,
    RemovedBlocks,
    StoredBlocks,
)
from servesim.fast.fpm_runs import FpmRun
from servesim.kv.event_records import RemovedRun, StoredRun, materialise
from servesim.sinks.builtin import fpm_record, kv_event_record
from servesim.sinks.jsonl_lines import fpm_line, fpm_run_lines, kv_event_line, kv_event_lines

u64 = st.integers(0, 2**64 - 1)
count = st.integers(0, 10**9)
finite = st.floats(allow_nan=False, allow_infinity=False)
at = st.one_of(finite, st.integers(0, 10**9))
mediums = st.sampled_from([None, "CPU"])  # host-tier events carry a medium (servesim.kv.host_tier)


@st.composite
def fpms(draw) -> ForwardPassMetrics:  # type: ignore[no-untyped-def]
    ints = {k: draw(count) for k in (
        "counter_id", "num_prefill_requests", "sum_prefill_tokens", "sum_prefill_kv_tokens",
        "num_decode_requests", "sum_decode_kv_tokens", "num_queued_prefill",
        "sum_queued_prefill_tokens", "num_queued_decode", "sum_queued_decode_kv_tokens")}
    floats = {k: draw(st.floats(0, 1e12)) for k in (
        "var_prefill_length", "var_decode_kv_tokens", "var_queued_prefill_length",
        "var_queued_decode_kv_tokens", "duration_ms")}
    return ForwardPassMetrics(worker_id=0, dp_rank=draw(st.integers(0, 64)), **ints, **floats)


@st.composite
def kv_events(draw) -> KvEvent:  # type: ignore[no-untyped-def]
    kind = draw(st.sampled_from(["stored", "removed", "cleared"]))
    if kind == "stored":
        with_ids = draw(st.booleans())
        blocks = tuple(
            KvBlock(draw(u64), draw(u64),
                    tuple(draw(st.lists(st.integers(0, 2**31), min_size=1, max_size=4)))
                    if with_ids else None)
            for _ in range(draw(st.integers(0, 4))))
        lora = draw(st.one_of(st.none(), st.integers(1, 65536)))
        name = draw(st.one_of(st.none(), st.text(max_size=6))) if lora else None  # quotes, non-ASCII
        data = StoredBlocks(draw(st.one_of(st.none(), u64)), blocks,
                            draw(st.one_of(st.none(), count)), draw(mediums), lora, name)
    elif kind == "removed":
        data = RemovedBlocks(tuple(draw(st.lists(u64, max_size=4))), draw(mediums))
    else:
        data = ClearedBlocks()
    return KvEvent(draw(count), draw(st.integers(0, 64)), data)


@settings(max_examples=300, derandomize=True)
@given(w=st.integers(0, 1000), at_ms=at, m=fpms())
def test_fpm_line_is_json_dumps_of_the_record(w: int, at_ms: float, m: ForwardPassMetrics) -> None:
    assert fpm_line(w, at_ms, m) == json.dumps(fpm_record(w, at_ms, m), allow_nan=False) + "\n"


@settings(max_examples=300, derandomize=True)
@given(w=st.integers(0, 1000), at_ms=at, e=kv_events())
def test_kv_event_line_is_json_dumps_of_the_record(w: int, at_ms: float, e: KvEvent) -> None:
    assert kv_event_line(w, at_ms, e) == json.dumps(kv_event_record(w, at_ms, e), allow_nan=False) + "\n"


@settings(max_examples=200, derandomize=True)
@given(w=st.integers(0, 1000), at_ms=at, events=st.lists(kv_events(), max_size=6))
def test_kv_event_lines_of_a_batch_are_each_events_line(w: int, at_ms: float, events: list) -> None:
    assert kv_event_lines(w, at_ms, events) == "".join(kv_event_line(w, at_ms, e) for e in events)


def test_non_finite_values_are_refused_as_json_would() -> None:
    with pytest.raises(ValueError, match="not JSON compliant"):
        fpm_line(0, float("inf"), ForwardPassMetrics())
    with pytest.raises(ValueError, match="not JSON compliant"):
        kv_event_line(0, float("nan"), KvEvent(0, 0, ClearedBlocks()))


@st.composite
def record_batches(draw) -> list:  # type: ignore[no-untyped-def]
    """Compact records as the pools publish them: long ``Removed`` runs (an eviction's), long
    and one-block ``Stored`` runs, on one or several ranks, consecutive ids per batch."""
    out: list = []
    next_id = draw(st.integers(0, 10**9))
    for _ in range(draw(st.integers(1, 5))):
        dp = draw(st.integers(0, 3))
        hs = draw(st.lists(u64, max_size=70))
        if draw(st.booleans()):
            out.append(RemovedRun(next_id, dp, hs))
            next_id += len(hs)
        elif hs:
            out.append(StoredRun(next_id, dp, draw(st.one_of(st.none(), u64)), hs,
                                 [draw(u64) for _ in hs]))
            next_id += 1
    return out


@settings(max_examples=300, derandomize=True)
@given(w=st.integers(0, 1000), at_ms=at, batch=record_batches())
def test_kv_lines_of_records_are_json_dumps_of_each_events_record(w: int, at_ms: float,
                                                                  batch: list) -> None:
    want = "".join(json.dumps(kv_event_record(w, at_ms, e), allow_nan=False) + "\n"
                   for e in materialise(batch))
    assert kv_event_lines(w, at_ms, batch) == want
    for rec in batch:  # each record alone (a one-record batch takes its own path)
        assert kv_event_lines(w, at_ms, [rec]) == "".join(
            json.dumps(kv_event_record(w, at_ms, e), allow_nan=False) + "\n" for e in rec.events())


@settings(max_examples=200, derandomize=True)
@given(w=st.integers(0, 1000), m=fpms(), k=st.integers(1, 40),
       data=st.data())
def test_fpm_run_lines_are_json_dumps_of_each_passs_record(w: int, m: ForwardPassMetrics, k: int,
                                                           data: st.DataObject) -> None:
    fixed = ("counter_id", "num_decode_requests", "sum_decode_kv_tokens", "var_decode_kv_tokens",
             "duration_ms")
    base = {a.name: getattr(m, a.name) for a in ForwardPassMetrics.__attrs_attrs__
            if a.name not in fixed}
    cols = [data.draw(st.lists(count, min_size=k, max_size=k)) for _ in range(2)]
    floats = [data.draw(st.lists(st.floats(0, 1e12), min_size=k, max_size=k)) for _ in range(2)]
    ats = data.draw(st.lists(at, min_size=k, max_size=k))
    run = FpmRun(base, m.counter_id, cols[0], cols[1], floats[0], floats[1])
    assert fpm_run_lines(w, ats, run) == [
        json.dumps(fpm_record(w, a, p), allow_nan=False) + "\n" for a, p in zip(ats, run, strict=True)]


def test_a_lora_requests_stored_line_names_its_adapter() -> None:
    """vLLM's BlockStored.lora_id and lora_name, on a LoRA request's lines only (also through
    the batch writer's short form for single blocks)."""
    lora = KvEvent(2, 0, StoredBlocks(None, (KvBlock(11, 5),), lora_id=3, lora_name="sql"))
    line = ('{"worker": 0, "dp_rank": 0, "at_ms": 1.5, "event_id": 2, "type": "BlockStored", '
            '"block_hashes": [11], "parent_block_hash": null, "tokens_hashes": [5], '
            '"lora_id": 3, "lora_name": "sql"}\n')
    assert kv_event_line(0, 1.5, lora) == kv_event_lines(0, 1.5, [lora]) == line
    base = KvEvent(3, 0, StoredBlocks(None, (KvBlock(11, 5),)))
    assert kv_event_lines(0, 1.5, [base]) == line.replace(', "lora_id": 3, "lora_name": "sql"', "") \
        .replace('"event_id": 2', '"event_id": 3')
