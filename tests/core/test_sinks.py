"""Built-in ``memory`` and ``jsonl`` sinks for KV events and forward-pass metrics."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from servesim.contract import (
    ClearedBlocks,
    ForwardPassMetrics,
    KvBlock,
    KvEvent,
    RemovedBlocks,
    StoredBlocks,
)
from servesim.plugins import Plugins
from servesim.sinks.base import SinkError, build_sink
from servesim.sinks.builtin import (
    JsonlFpmSink,
    JsonlKvEventSink,
    JsonlSinkConfig,
    MemoryFpmSink,
    MemoryKvEventSink,
)

STORED = KvEvent(0, 1, StoredBlocks(None, (KvBlock(11, 101), KvBlock(12, 102))))
STORED_CHILD = KvEvent(
    1, 1, StoredBlocks(12, (KvBlock(13, 103, (5, 6)), KvBlock(14, 104, (7, 8))), start_position=4)
)
REMOVED = KvEvent(2, 1, RemovedBlocks((14, 13)))
CLEARED = KvEvent(3, 1, ClearedBlocks())
FPM = ForwardPassMetrics(
    worker_id=3, dp_rank=1, counter_id=9, num_prefill_requests=2, sum_prefill_tokens=40,
    var_prefill_length=4.0, num_decode_requests=1, sum_decode_kv_tokens=17, duration_ms=12.5,
)


def _lines(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines()]


def test_memory_sinks_keep_events_in_order() -> None:
    kv = MemoryKvEventSink()
    kv.publish(3, 10.0, [STORED, STORED_CHILD])
    kv.publish(4, 12.0, [REMOVED])
    assert kv.events == [(3, 10.0, STORED), (3, 10.0, STORED_CHILD), (4, 12.0, REMOVED)]
    fpm = MemoryFpmSink()
    fpm.publish(3, 12.5, FPM)
    assert fpm.metrics == [(3, 12.5, FPM)]
    kv.close()
    fpm.close()
    with pytest.raises(SinkError, match="memory kv-event sink: publish after close"):
        kv.publish(3, 13.0, [CLEARED])
    with pytest.raises(SinkError, match="memory fpm sink: publish after close"):
        fpm.publish(3, 13.0, FPM)


def test_jsonl_kv_event_sink_writes_one_object_per_event(tmp_path: Path) -> None:
    path = tmp_path / "sub" / "kv.jsonl"
    sink = JsonlKvEventSink(JsonlSinkConfig(str(path)))
    sink.publish(3, 10.0, [STORED, STORED_CHILD])
    sink.publish(3, 12.25, [REMOVED, CLEARED])
    sink.publish(3, 13.0, [])
    sink.close()
    sink.close()  # idempotent
    assert _lines(path) == [
        {"worker": 3, "dp_rank": 1, "at_ms": 10.0, "event_id": 0, "type": "BlockStored",
         "block_hashes": [11, 12], "parent_block_hash": None, "tokens_hashes": [101, 102]},
        {"worker": 3, "dp_rank": 1, "at_ms": 10.0, "event_id": 1, "type": "BlockStored",
         "block_hashes": [13, 14], "parent_block_hash": 12, "tokens_hashes": [103, 104],
         "token_ids": [5, 6, 7, 8], "start_position": 4},
        {"worker": 3, "dp_rank": 1, "at_ms": 12.25, "event_id": 2, "type": "BlockRemoved",
         "block_hashes": [14, 13]},
        {"worker": 3, "dp_rank": 1, "at_ms": 12.25, "event_id": 3, "type": "AllBlocksCleared"},
    ]
    first = path.read_text().splitlines()[0]
    assert first.startswith('{"worker": 3, "dp_rank": 1, "at_ms": 10.0, "event_id": 0, "type"')


def test_jsonl_keeps_full_64_bit_hashes(tmp_path: Path) -> None:
    big = 2**64 - 1
    path = tmp_path / "kv.jsonl"
    sink = JsonlKvEventSink(JsonlSinkConfig(str(path)))
    sink.publish(0, 0.0, [KvEvent(0, 0, StoredBlocks(big - 1, (KvBlock(big, big - 2),)))])
    sink.close()
    (rec,) = _lines(path)
    assert rec["block_hashes"] == [big] and rec["parent_block_hash"] == big - 1


def test_jsonl_fpm_sink(tmp_path: Path) -> None:
    path = tmp_path / "fpm.jsonl"
    sink = JsonlFpmSink(JsonlSinkConfig(str(path)))
    sink.publish(3, 12.5, FPM)
    sink.publish(3, 20.0, ForwardPassMetrics(worker_id=3, dp_rank=0, counter_id=10))
    sink.close()
    first_line = path.read_text().splitlines()[0]
    # The wire object of servesim.sinks.fpm_schema (Dynamo's ForwardPassMetrics), then at_ms.
    assert first_line == (
        '{"version": 1, "worker_id": "3", "dp_rank": 1, "counter_id": 9, "wall_time": 0.0125, '
        '"scheduled_requests": {"num_prefill_requests": 2, "sum_prefill_tokens": 40, '
        '"var_prefill_length": 4.0, "sum_prefill_kv_tokens": 0, "num_decode_requests": 1, '
        '"sum_decode_kv_tokens": 17, "var_decode_kv_tokens": 0.0}, '
        '"queued_requests": {"num_prefill_requests": 0, "sum_prefill_tokens": 0, '
        '"var_prefill_length": 0.0, "num_decode_requests": 0, "sum_decode_kv_tokens": 0, '
        '"var_decode_kv_tokens": 0.0}, "at_ms": 12.5}'
    )
    first, second = _lines(path)
    assert (second["dp_rank"], second["counter_id"], second["wall_time"]) == (0, 10, 0.0)
    assert second["scheduled_requests"]["num_decode_requests"] == 0 and second["at_ms"] == 20.0


def test_jsonl_errors_are_sink_errors_naming_the_sink(tmp_path: Path) -> None:
    blocker = tmp_path / "file"
    blocker.write_text("")
    with pytest.raises(SinkError, match=r"jsonl kv-event sink '.*file/kv.jsonl': cannot open"):
        JsonlKvEventSink(JsonlSinkConfig(str(blocker / "kv.jsonl")))
    with pytest.raises(SinkError, match="jsonl fpm sink .*cannot open"):
        JsonlFpmSink(JsonlSinkConfig(str(tmp_path)))  # a directory
    sink = JsonlFpmSink(JsonlSinkConfig(str(tmp_path / "f.jsonl")))
    with pytest.raises(SinkError, match="jsonl fpm sink .*cannot write.*not JSON compliant"):
        sink.publish(0, 1.0, ForwardPassMetrics(duration_ms=float("nan")))
    sink.close()
    with pytest.raises(SinkError, match="jsonl fpm sink .*publish after close"):
        sink.publish(0, 1.0, FPM)
    kv = JsonlKvEventSink(JsonlSinkConfig(str(tmp_path / "k.jsonl")))
    with pytest.raises(SinkError, match="jsonl kv-event sink .*unknown KV event data"):
        kv.publish(0, 1.0, [KvEvent(0, 0, "bogus")])  # type: ignore[arg-type]
    kv.close()


def test_built_in_sinks_are_registered_and_buildable(tmp_path: Path) -> None:
    plugins = Plugins(autoload=False)
    kv_reg, fpm_reg = plugins.kv_event_sinks(), plugins.fpm_sinks()
    assert {"memory", "jsonl"} <= set(kv_reg.names())
    assert {"memory", "jsonl"} <= set(fpm_reg.names())
    mem = build_sink(kv_reg.get("memory"), None)
    assert isinstance(mem, MemoryKvEventSink)
    cls = fpm_reg.get("jsonl")
    assert cls.config_class is JsonlSinkConfig
    sink = build_sink(cls, JsonlSinkConfig(str(tmp_path / "x.jsonl")))
    sink.publish(1, 2.0, FPM)
    sink.close()
    assert _lines(tmp_path / "x.jsonl")[0]["worker_id"] == "1"


def test_jsonl_kv_sink_asks_for_token_ids_when_configured(tmp_path: Path) -> None:
    """``token_ids: true`` makes the replay materialise block tokens (the ranks' job), so
    every BlockStored line carries them; by default the sink asks for nothing."""
    from servesim.sinks.builtin import JsonlKvSinkConfig

    plain = JsonlKvEventSink(JsonlSinkConfig(str(tmp_path / "a.jsonl")))
    asked = JsonlKvEventSink(JsonlKvSinkConfig(str(tmp_path / "b.jsonl"), token_ids=True))
    assert (plain.wants_token_ids, asked.wants_token_ids) == (False, True)
    plain.close()
    asked.close()
