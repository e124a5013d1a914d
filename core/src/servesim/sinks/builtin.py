"""Built-in sinks: ``memory`` (keeps everything in lists, for tests and notebooks) and
``jsonl`` (one JSON object per line), each for KV events and for forward-pass metrics.

JSONL shapes (one object per event; keys in this order):

KV events — the identity of the event, then its data in a vLLM/Dynamo-like shape::

    {"worker": 0, "dp_rank": 0, "at_ms": 12.5, "event_id": 3, "type": "BlockStored",
     "block_hashes": [..], "parent_block_hash": 123 | null, "tokens_hashes": [..],
     "token_ids": [..] (when the rank materialised block tokens, which ``token_ids: true``
                        asks for; flattened like vLLM),
     "start_position": 0 (only when the rank reported one),
     "medium": "CPU" (only for a host-tier block, servesim.kv.host_tier),
     "lora_id": 3, "lora_name": "sql" (only for a LoRA request's blocks: its adapter id and
                                       served name, vLLM's BlockStored fields)}
    {"worker": 0, "dp_rank": 0, "at_ms": 12.5, "event_id": 4, "type": "BlockRemoved",
     "block_hashes": [..], "medium": "CPU" (host tier only)}
    {"worker": 0, "dp_rank": 0, "at_ms": 12.5, "event_id": 5, "type": "AllBlocksCleared"}

``block_hashes`` are sequence-aware (chained) hashes and ``tokens_hashes`` the token-only
local hashes (dynamo-mocker.md §3.1), so a router can index either.

Forward-pass metrics — the nested object the ZMQ wire carries (:mod:`servesim.sinks.fpm_schema`,
Dynamo's ``ForwardPassMetrics``), one per pass, with ``at_ms`` (the pass's simulated end)
appended::

    {"version": 1, "worker_id": "0", "dp_rank": 0, "counter_id": 7, "wall_time": 0.0123,
     "scheduled_requests": {..}, "queued_requests": {..}, "at_ms": 12.5}

Lines are formatted by :mod:`servesim.sinks.jsonl_lines`, byte for byte what ``json.dumps`` gives
for these records. Both sinks encode ahead (``encodes_ahead``, :mod:`servesim.fast.sink_protocols`): a
multi-worker replay formats each batch's lines when the batch is produced and buffers only
the text until the merged order releases it.

Errors never pass silently (sinks.py): any failure while opening, writing or closing is a
:class:`~servesim.sinks.base.SinkError` naming the sink and its file.

A JSONL file is ``PATH.partial`` while it is written and becomes ``PATH`` when the sink is
closed; a failed or interrupted run (``abandon``, :func:`servesim.sinks.base.abandon_sinks`)
leaves ``PATH.partial`` beside an earlier ``PATH``, which it never touches
(:class:`servesim.config.output_paths.GrowingFile`).
"""

from __future__ import annotations

import json
import os
from collections.abc import Sequence
from typing import IO, Any, Self

from attrs import field, frozen, validators

from servesim.config.output_paths import GrowingFile, file_problem
from servesim.contract import (
    ClearedBlocks,
    ForwardPassMetrics,
    KvEvent,
    RemovedBlocks,
    StoredBlocks,
)
from servesim.errors import UserError
from servesim.sinks.base import FpmSink, KvEventSink, SinkContext, SinkError
from servesim.sinks.fpm_columns import FpmColumns
from servesim.sinks.fpm_schema import fpm_object
from servesim.sinks.jsonl_lines import fpm_line, fpm_run_lines, kv_event_lines


class SinkOpenError(SinkError, UserError):
    """A sink's file cannot be created: a bad path the user can fix (one line, exit 2)."""


@frozen
class JsonlSinkConfig:
    """``path``: the file to write (created or truncated; parent folders are created)."""

    path: str = field(validator=validators.instance_of(str))


@frozen
class JsonlKvSinkConfig(JsonlSinkConfig):
    """``token_ids``: make every rank materialise the tokens of stored blocks (as
    ``engine.emit_kv_token_ids`` does), so each ``BlockStored`` line carries them."""

    token_ids: bool = field(default=False, validator=validators.instance_of(bool))


# --------------------------------------------------------------------------- memory


class MemoryKvEventSink(KvEventSink):
    """Keeps ``(worker_id, at_ms, event)`` in :attr:`events`, in publication order."""

    def __init__(self) -> None:
        self.events: list[tuple[int, float, KvEvent]] = []
        self.closed = False

    def publish(self, worker_id: int, at_ms: float, events: Sequence[KvEvent]) -> None:
        if self.closed:
            raise SinkError("memory kv-event sink: publish after close")
        self.events.extend((worker_id, at_ms, e) for e in events)

    def close(self) -> None:
        self.closed = True


class MemoryFpmSink(FpmSink):
    """Keeps ``(worker_id, at_ms, metrics)`` in :attr:`metrics`, in publication order."""

    def __init__(self) -> None:
        self.metrics: list[tuple[int, float, ForwardPassMetrics]] = []
        self.closed = False

    def publish(self, worker_id: int, at_ms: float, metrics: ForwardPassMetrics) -> None:
        if self.closed:
            raise SinkError("memory fpm sink: publish after close")
        self.metrics.append((worker_id, at_ms, metrics))

    def close(self) -> None:
        self.closed = True


# --------------------------------------------------------------------------- jsonl


class _JsonlWriter:
    """A buffered line writer whose every failure is a SinkError naming ``label``."""

    def __init__(self, label: str, config: JsonlSinkConfig, *, validating: bool = False) -> None:
        self.name = f"jsonl {label} sink {config.path!r}"
        self._fh: IO[str] | None = None
        self._file: GrowingFile | None = None
        # The writer process its lines go to instead (servesim.fast.sink_offload).
        self.handed_to: Any = None
        if validating:  # servesim validate: check the path, create nothing
            problem = file_problem(config.path)
            if problem is not None:
                raise SinkOpenError(f"{self.name}: cannot open: {problem}")
            return
        try:
            self._file = GrowingFile(str(config.path))
            self._fh = self._file.fh
        except OSError as exc:
            raise SinkOpenError(f"{self.name}: cannot open: {exc.strerror or exc}") from exc

    @classmethod
    def on_fd(cls, name: str, fd: int) -> _JsonlWriter:
        """A writer of an already open file descriptor (a writer process's inherited copy)."""
        self = cls.__new__(cls)
        self.name = name
        self.handed_to = None
        self._file = None
        try:
            self._fh = os.fdopen(fd, "w", encoding="utf-8")
        except OSError as exc:
            raise SinkOpenError(f"{name}: cannot open: {exc.strerror or exc}") from exc
        return self

    def hand_to(self, writer: Any) -> tuple[int, str]:
        """Leave the writing to ``writer`` (a writer process, which inherits the descriptor
        and writes from the start of the file): the descriptor and this sink's name."""
        if self._fh is None:
            raise SinkError(f"{self.name}: handed on after close")
        self._fh.flush()
        self.handed_to = writer
        return self._fh.fileno(), self.name

    def write(self, records: list[dict[str, Any]]) -> None:
        self.write_text("".join(json.dumps(r, allow_nan=False) + "\n" for r in records))

    def write_text(self, text: str) -> None:
        if self._fh is None or self.handed_to is not None:
            raise SinkError(f"{self.name}: publish after close" if self._fh is None
                            else f"{self.name}: its lines go to a writer process")
        try:
            self._fh.write(text)
        except (OSError, ValueError, TypeError) as exc:
            raise SinkError(f"{self.name}: cannot write: {exc}") from exc

    def abandon(self) -> None:
        """The run failed or was interrupted: :meth:`close` leaves the file as ``PATH.partial``
        (servesim.sinks.base)."""
        if self._file is not None:
            self._file.abandon()

    def close(self) -> None:
        fh, self._fh = self._fh, None
        if fh is None:
            return
        try:
            if self.handed_to is not None:  # the writer process writes and closes its copy
                self.handed_to.finish()
        finally:
            try:
                if self._file is not None:
                    self._file.close()
                else:
                    fh.close()
            except OSError as exc:
                raise SinkError(f"{self.name}: cannot close: {exc.strerror or exc}") from exc


class _HandsOnItsFile:
    """What the built-in JSONL sinks share for a writer process (servesim.fast.sink_offload):
    handing their file over, and the sink standing for one in that process."""

    _out: _JsonlWriter

    def hand_to(self, writer: Any) -> tuple[int, str]:
        """See :meth:`_JsonlWriter.hand_to`."""
        return self._out.hand_to(writer)

    @classmethod
    def on_fd(cls, name: str, fd: int) -> Self:
        """The sink a writer process formats and writes with, on an inherited descriptor."""
        sink = cls.__new__(cls)
        sink.adopt(_JsonlWriter.on_fd(name, fd))
        return sink

    def adopt(self, out: _JsonlWriter) -> None:
        """Write through ``out`` (a writer on an inherited descriptor)."""
        self._out = out

    def abandon(self) -> None:
        """See :meth:`_JsonlWriter.abandon`."""
        self._out.abandon()


def kv_event_record(worker_id: int, at_ms: float, event: KvEvent) -> dict[str, Any]:
    """The JSON object written for one KV event (see the module docs)."""
    rec: dict[str, Any] = {
        "worker": worker_id,
        "dp_rank": event.dp_rank,
        "at_ms": at_ms,
        "event_id": event.event_id,
    }
    data = event.data
    if isinstance(data, StoredBlocks):
        rec["type"] = "BlockStored"
        rec["block_hashes"] = [b.block_hash for b in data.blocks]
        rec["parent_block_hash"] = data.parent_hash
        rec["tokens_hashes"] = [b.tokens_hash for b in data.blocks]
        if data.blocks and all(b.token_ids is not None for b in data.blocks):
            rec["token_ids"] = [t for b in data.blocks for t in b.token_ids]  # type: ignore[union-attr]
        if data.start_position is not None:
            rec["start_position"] = data.start_position
        if data.medium is not None:
            rec["medium"] = data.medium
        if data.lora_id is not None:
            rec["lora_id"] = data.lora_id
            rec["lora_name"] = data.lora_name
    elif isinstance(data, RemovedBlocks):
        rec["type"] = "BlockRemoved"
        rec["block_hashes"] = list(data.block_hashes)
        if data.medium is not None:
            rec["medium"] = data.medium
    elif isinstance(data, ClearedBlocks):
        rec["type"] = "AllBlocksCleared"
    else:
        raise TypeError(f"unknown KV event data {type(data).__name__}")
    return rec


def fpm_record(worker_id: int, at_ms: float, metrics: ForwardPassMetrics) -> dict[str, Any]:
    """The JSON object written for one forward pass (see the module docs)."""
    rec = fpm_object(worker_id, metrics)
    rec["at_ms"] = at_ms
    return rec


class JsonlKvEventSink(_HandsOnItsFile, KvEventSink):
    """Writes each KV event as one JSON line."""

    config_class = JsonlKvSinkConfig
    wants_token_ids = False  # set per sink from its config; False for a writer process's (on_fd)

    def __init__(self, config: JsonlKvSinkConfig, *, validating: bool = False) -> None:
        self._out = _JsonlWriter("kv-event", config, validating=validating)
        self.wants_token_ids = getattr(config, "token_ids", False)

    @classmethod
    def from_config(cls, config: JsonlKvSinkConfig, context: SinkContext | None) -> JsonlKvEventSink:
        return cls(config, validating=context is not None and context.validating)

    encodes_ahead = True
    accepts_kv_records = True  # kv_event_lines formats compact records too
    joins_encoded = True  # encodings are lines: several are written as one text

    def publish(self, worker_id: int, at_ms: float, events: Sequence[KvEvent]) -> None:
        self._out.write_text(self.encode(worker_id, at_ms, events))

    def encode(self, worker_id: int, at_ms: float, events: Sequence[KvEvent]) -> str:
        try:
            return kv_event_lines(worker_id, at_ms, events)
        except ValueError as exc:
            raise SinkError(f"{self._out.name}: cannot write: {exc}") from exc
        except (TypeError, AttributeError) as exc:
            raise SinkError(f"{self._out.name}: {exc}") from exc

    def write_encoded(self, data: str) -> None:
        self._out.write_text(data)

    def close(self) -> None:
        self._out.close()


class JsonlFpmSink(_HandsOnItsFile, FpmSink):
    """Writes each forward pass's metrics as one JSON line."""

    config_class = JsonlSinkConfig

    def __init__(self, config: JsonlSinkConfig, *, validating: bool = False) -> None:
        self._out = _JsonlWriter("fpm", config, validating=validating)

    @classmethod
    def from_config(cls, config: JsonlSinkConfig, context: SinkContext | None) -> JsonlFpmSink:
        return cls(config, validating=context is not None and context.validating)

    encodes_ahead = True

    def publish(self, worker_id: int, at_ms: float, metrics: ForwardPassMetrics) -> None:
        self._out.write_text(self.encode(worker_id, at_ms, metrics))

    def encode(self, worker_id: int, at_ms: float, metrics: ForwardPassMetrics) -> str:
        try:
            return fpm_line(worker_id, at_ms, metrics)
        except ValueError as exc:
            raise SinkError(f"{self._out.name}: cannot write: {exc}") from exc
        except (AttributeError, TypeError) as exc:
            raise SinkError(f"{self._out.name}: {exc}") from exc

    encodes_fpm_runs = True  # encode_run formats a run's lines from its columns
    joins_encoded = True  # encodings are lines: several are written as one text

    def encode_run(self, worker_id: int, ats: Sequence[float], run: FpmColumns) -> list[str]:
        """One line a pass of ``run`` (ending at ``ats``), as :meth:`encode` writes them."""
        try:
            return fpm_run_lines(worker_id, ats, run)
        except ValueError as exc:
            raise SinkError(f"{self._out.name}: cannot write: {exc}") from exc
        except (AttributeError, TypeError, KeyError) as exc:
            raise SinkError(f"{self._out.name}: {exc}") from exc

    def write_encoded(self, data: str) -> None:
        self._out.write_text(data)

    def close(self) -> None:
        self._out.close()


__all__ = [
    "JsonlFpmSink",
    "JsonlKvEventSink",
    "JsonlKvSinkConfig",
    "JsonlSinkConfig",
    "MemoryFpmSink",
    "MemoryKvEventSink",
    "fpm_record",
    "kv_event_record",
]
