"""The merge buffer and the built-in JSONL sinks' lines in a second process (``sinks.writer``).

A several-worker replay with both JSONL sinks spends as much time on their text, and on
ordering it (:mod:`servesim.fast.sink_merge`), as on producing what goes into it. With
``sinks.writer: process`` (or ``auto`` on a large replay and a machine with a second CPU),
:class:`SinkWriterProcess` stands in for the :class:`~servesim.fast.sink_merge.SinkMerge`:
each call the driver makes becomes one compact msgpack message (a batch's numbers, not its
text), and at each release the messages since the last one go, in order, to a child process
(:mod:`servesim.fast.sink_offload_child`). The child makes the very same calls on a real
``SinkMerge`` of sinks writing to the files this process opened (their descriptors are
inherited), so the files hold the same bytes either way, and a failure there has the message
it would have here.

What msgpack would not carry unchanged is encoded here by the stream's sink and sent as
text: a KV batch holding a ``KvEvent`` object (host-tier events, other producers), and any
batch with a value msgpack refuses. A failure in the child is reported at the next release
or at the end of the replay, the message being the one the sink raises in a replay without
the writer process; the file may then hold lines of later releases that were sent before
the failure was seen.

Messages (msgpack arrays, first item a tag; :data:`MESSAGE`):
``[0, worker, at, start, records]`` a KV batch of compact records (``[0, event_id, dp_rank,
hashes]`` a ``RemovedRun``, ``[1, event_id, dp_rank, parent_hash, hashes, tokens_hashes]`` a
``StoredRun``),
``[1, worker, at, start, metrics]`` one pass's metrics (a map of ``ForwardPassMetrics``),
``[2, worker, ats, start, base, counter0, num_decode, sum_decode_kv, var_decode,
durations]`` a run's metrics by column (:class:`~servesim.fast.fpm_runs.FpmRun`),
``[3, fpm, worker, at, start, dp_rank, text]`` a batch encoded here,
``[4, worker, ats, start, dp_rank, lines]`` a run's lines encoded here,
``[5, watermark]`` a release, ``[6]`` the last release.
"""

from __future__ import annotations

import json
import os
import struct
import subprocess
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

try:
    import fcntl
except ImportError:  # pragma: no cover - not POSIX
    fcntl = None  # type: ignore[assignment]

from msgspec import Raw, Struct
from msgspec.msgpack import Encoder

from servesim.config.sections import SinkWriterMode
from servesim.contract import ForwardPassMetrics
from servesim.fast.fpm_runs import FpmRun
from servesim.kv.event_records import RECORD_TYPES, RemovedRun, StoredRun
from servesim.sinks.base import SinkError
from servesim.sinks.builtin import JsonlFpmSink, JsonlKvEventSink
from servesim.sinks.publish import encode, encode_run

#: ``sinks.writer: auto`` uses a writer process from this many requests on.
AUTO_MIN_REQUESTS = 2000
#: A frame's length, before its msgpack body (an array of messages).
HEADER = struct.Struct("<Q")
#: The pipe's capacity asked for (Linux; the default is 64 KiB): the replay runs on while the
#: writer process starts, instead of waiting for it on a full pipe.
PIPE_BYTES = 1 << 20

#: The writer process's first lines (argv: the folder holding this servesim, the sinks).
_BOOT = ("import sys\n"
         "root = sys.argv[1]\n"
         "if root not in sys.path:\n"
         "    sys.path.insert(0, root)\n"
         "from servesim.fast.sink_offload_child import main\n"
         "sys.exit(main(sys.argv[2:]))\n")

_RECORDS = frozenset(RECORD_TYPES)
_NUMBERS = frozenset((float, int))
#: Tags of the records in a KV message.
REMOVED, STORED = 0, 1


def _record(r: Any) -> tuple[Any, ...]:
    """A compact record as msgpack carries it (the encoder's hook for the record types)."""
    t = type(r)
    if t is RemovedRun:
        return (REMOVED, r.event_id, r.dp_rank, r.hashes)
    if t is StoredRun:
        return (STORED, r.event_id, r.dp_rank, r.parent_hash, r.hashes, r.tokens_hashes)
    raise TypeError(f"cannot pass a {t.__name__} to the writer process")


def records_of(items: list[Any]) -> list[Any]:
    """The records a KV message carries, rebuilt (in the writer process)."""
    return [RemovedRun(i[1], i[2], i[3]) if i[0] == REMOVED else StoredRun(i[1], i[2], i[3], i[4], i[5])
            for i in items]


_encode = Encoder(enc_hook=_record).encode

Num = float | int


class KvMessage(Struct, array_like=True, tag=0):
    w: int
    at: Num
    start: Num
    records: list[Any]  # per record :func:`_record`'s tuple


class FpmMessage(Struct, array_like=True, tag=1):
    w: int
    at: Num
    start: Num
    metrics: dict[str, Any]


class RunMessage(Struct, array_like=True, tag=2):
    w: int
    ats: list[Any]
    start: Num
    base: dict[str, Any]
    counter0: int
    num_decode: list[Any]
    sum_decode_kv: list[Any]
    var_decode: list[Any]
    durations: list[Any]


class TextMessage(Struct, array_like=True, tag=3):
    fpm: bool
    w: int
    at: Any
    start: Any
    dp: int
    text: str


class RunTextMessage(Struct, array_like=True, tag=4):
    w: int
    ats: list[Any]
    start: Any
    dp: int
    lines: list[str]


class ReleaseMessage(Struct, array_like=True, tag=5):
    watermark: Num


class ReleaseAllMessage(Struct, array_like=True, tag=6):
    pass


MESSAGE = (KvMessage | FpmMessage | RunMessage | TextMessage | RunTextMessage | ReleaseMessage
           | ReleaseAllMessage)


def usable_cpus() -> int:
    """CPUs this process may run on."""
    try:
        return len(os.sched_getaffinity(0))
    except (AttributeError, OSError):  # pragma: no cover - platforms without affinity
        return os.cpu_count() or 1


def writes_in_process(mode: SinkWriterMode, num_requests: int) -> bool:
    """Whether ``sinks.writer`` asks for a writer process for a replay of ``num_requests``."""
    if mode is SinkWriterMode.AUTO:
        return num_requests >= AUTO_MIN_REQUESTS and os.name == "posix" and usable_cpus() >= 2
    return mode is SinkWriterMode.PROCESS


def can_offload(kv_sinks: Sequence[Any], fpm_sinks: Sequence[Any]) -> bool:
    """Whether the sinks are what a writer process can stand in for: at most one of each
    stream, each exactly a built-in JSONL sink (a subclass may make other lines), at least
    one in all."""
    return (bool(kv_sinks or fpm_sinks) and len(kv_sinks) <= 1 and len(fpm_sinks) <= 1
            and all(type(s) is JsonlKvEventSink for s in kv_sinks)
            and all(type(s) is JsonlFpmSink for s in fpm_sinks))


def _widen_pipe(fd: int) -> None:
    setpipe = getattr(fcntl, "F_SETPIPE_SZ", None) if fcntl is not None else None
    if setpipe is None:  # pragma: no cover - not Linux
        return
    try:
        fcntl.fcntl(fd, setpipe, PIPE_BYTES)
    except OSError:  # above /proc/sys/fs/pipe-max-size: the default capacity serves too
        pass


class SinkWriterProcess:
    """Stands in for a SinkMerge (the methods the driver calls): its merge, formatting and
    writing run in a child process."""

    def __init__(self, kv_sink: Any, fpm_sink: Any) -> None:
        """``kv_sink``, ``fpm_sink``: a built-in JSONL sink of each stream, or None
        (:func:`can_offload`)."""
        self.kv_sinks = [kv_sink] if kv_sink is not None else []
        self.fpm_sinks = [fpm_sink] if fpm_sink is not None else []
        # Messages since the last release (the driver reads its length, as a merge's buffer).
        self.buf: list[Raw] = []
        self._done = False
        spec: dict[str, Any] = {}
        for key, sink in (("kv", kv_sink), ("fpm", fpm_sink)):
            if sink is not None:
                fd, name = sink.hand_to(self)
                spec[key] = [fd, name]
        self.name = ", ".join(name for _fd, name in spec.values())
        # The child imports this same servesim: from where this one was imported, put first
        # on its path when the interpreter's own path lacks it (added at run time here).
        root = str(Path(__file__).resolve().parents[2])
        try:
            self._proc = subprocess.Popen(
                [sys.executable, "-c", _BOOT, root, json.dumps(spec)],
                stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                pass_fds=[fd for fd, _name in spec.values()])
        except (OSError, ValueError) as exc:
            for sink in (kv_sink, fpm_sink):
                if sink is not None:
                    sink.hand_to(None)  # the sink keeps its own file
            raise SinkError(f"{self.name}: cannot start the writer process: {exc}") from exc
        assert self._proc.stdin is not None
        _widen_pipe(self._proc.stdin.fileno())

    # -- what the driver calls (servesim.fast.sink_merge.SinkMerge's methods) -----------

    def kv(self, w: int, at: float, start: float, events: Sequence[Any]) -> None:
        # Only records go by their numbers (msgspec would encode a KvEvent, an attrs class,
        # as a map rather than call the hook, which refuses it).
        if not (type(at) in _NUMBERS and type(start) in _NUMBERS
                and _RECORDS.issuperset(map(type, events)) and self._packed((0, w, at, start, events))):
            text = encode(self.kv_sinks[0], w, at, events)
            self._send_one((3, False, w, at, start, events[0].dp_rank, text))

    def fpm(self, w: int, at: float, start: float, metrics: ForwardPassMetrics) -> None:
        if not (type(at) in _NUMBERS and type(start) in _NUMBERS
                and type(metrics) is ForwardPassMetrics and self._packed((1, w, at, start, metrics))):
            text = encode(self.fpm_sinks[0], w, at, metrics)
            self._send_one((3, True, w, at, start, metrics.dp_rank, text))

    def fpm_run_of(self, w: int, ats: list[float], start: float, run: FpmRun) -> None:
        if not (type(start) in _NUMBERS and type(run) is FpmRun
                and self._packed((2, w, ats, start, run.base, run.counter0, run.num_decode,
                                  run.sum_decode_kv, run.var_decode, run.durations))):
            lines = encode_run(self.fpm_sinks[0], w, ats, run)
            self._send_one((4, w, ats, start, run.base["dp_rank"], lines))

    def release(self, watermark: float) -> None:
        self._send_one((5, watermark))
        self._flush()

    def release_all(self) -> None:
        self._send_one((6,))
        self._flush()

    def finish(self) -> None:
        """End the input, wait for the child to write everything and close its files; a
        failure it reported is raised here (once)."""
        if self._done:
            return
        self._done = True
        self.buf = []
        stdin, stdout = self._proc.stdin, self._proc.stdout
        assert stdin is not None and stdout is not None
        try:
            stdin.close()
        except OSError:
            pass
        message = stdout.read().decode("utf-8", "replace").strip()
        stdout.close()
        status = self._proc.wait()
        if status != 0:
            raise SinkError(message or f"{self.name}: the writer process exited with status {status}")

    # -- plumbing --------------------------------------------------------------------------

    def _packed(self, message: tuple[Any, ...]) -> bool:
        """Buffer ``message`` if msgpack carries every value of it; whether it did."""
        try:
            self.buf.append(Raw(_encode(message)))
        except (TypeError, OverflowError, ValueError):
            return False
        return True

    def _send_one(self, message: tuple[Any, ...]) -> None:
        try:
            self.buf.append(Raw(_encode(message)))
        except (TypeError, OverflowError, ValueError) as exc:
            raise SinkError(f"{self.name}: cannot pass a batch to the writer process: {exc}") from exc

    def _flush(self) -> None:
        if self._done:
            raise SinkError(f"{self.name}: output after the writer process finished")
        body = _encode(self.buf)
        self.buf = []
        stdin = self._proc.stdin
        assert stdin is not None
        try:
            stdin.write(HEADER.pack(len(body)))
            stdin.write(body)
        except OSError:  # the child stopped reading: it failed, and says why
            self.finish()
            raise SinkError(f"{self.name}: the writer process stopped") from None


__all__ = ["AUTO_MIN_REQUESTS", "HEADER", "MESSAGE", "SinkWriterProcess", "can_offload", "records_of",
           "usable_cpus", "writes_in_process"]
