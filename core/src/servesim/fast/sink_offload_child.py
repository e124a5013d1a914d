"""The writer process of :mod:`servesim.fast.sink_offload`.

    main(['{"kv": [FD, NAME], "fpm": [FD, NAME]}'])  (started by SinkWriterProcess)

Reads frames from standard input (an 8-byte little-endian length, then a msgpack array of
messages, :data:`~servesim.fast.sink_offload.MESSAGE`) and makes each message's call on a
:class:`~servesim.fast.sink_merge.SinkMerge` of built-in JSONL sinks writing to the
inherited descriptors: the merge, the formatting and the writing of a replay without the
writer process, message for call. At the end of its input it closes the files and exits 0;
on a failure it writes the message to standard output, closes the files and exits 3.
Interrupts are ignored: the replaying process ends the input when it stops, and everything
it sent is written.
"""

from __future__ import annotations

import json
import signal
import sys
from typing import Any, BinaryIO

from msgspec.msgpack import Decoder

from servesim.contract import ForwardPassMetrics
from servesim.fast.fpm_runs import FpmRun
from servesim.fast.sink_merge import SinkMerge
from servesim.fast.sink_offload import (
    HEADER,
    MESSAGE,
    FpmMessage,
    KvMessage,
    ReleaseAllMessage,
    ReleaseMessage,
    RunMessage,
    RunTextMessage,
    TextMessage,
    records_of,
)
from servesim.sinks.base import SinkError
from servesim.sinks.builtin import JsonlFpmSink, JsonlKvEventSink

#: Exit status after a failure whose message went to standard output.
FAILED = 3


def _read(stream: BinaryIO, n: int) -> bytes:
    data = stream.read(n)
    if len(data) != n:
        raise SinkError(f"the writer process's input ended inside a frame ({len(data)} of {n} bytes)")
    return data


def apply(merge: SinkMerge, messages: list[Any]) -> None:
    """Make each message's call on ``merge``, in order."""
    for m in messages:
        t = type(m)
        if t is KvMessage:
            merge.kv(m.w, m.at, m.start, records_of(m.records))
        elif t is RunMessage:
            merge.fpm_run_of(m.w, m.ats, m.start, FpmRun(m.base, m.counter0, m.num_decode,
                                                          m.sum_decode_kv, m.var_decode, m.durations))
        elif t is FpmMessage:
            merge.fpm(m.w, m.at, m.start, ForwardPassMetrics(**m.metrics))
        elif t is ReleaseMessage:
            merge.release(m.watermark)
        elif t is ReleaseAllMessage:
            merge.release_all()
        elif t is TextMessage:
            merge.encoded(m.fpm, m.w, m.at, m.start, m.dp, m.text)
        elif t is RunTextMessage:
            merge.fpm_run(m.w, m.ats, m.start, m.dp, [m.lines])
        else:  # pragma: no cover - the decoder yields only the types above
            raise SinkError(f"the writer process got an unknown message {m!r}")


def serve(stdin: BinaryIO, merge: SinkMerge) -> None:
    decode = Decoder(list[MESSAGE]).decode
    while True:
        head = stdin.read(HEADER.size)
        if not head:
            return
        if len(head) != HEADER.size:
            head += _read(stdin, HEADER.size - len(head))
        (n,) = HEADER.unpack(head)
        apply(merge, decode(_read(stdin, n)))


def main(argv: list[str]) -> int:
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    spec = json.loads(argv[0])
    sinks: list[Any] = []
    status = 0
    try:
        kv = [JsonlKvEventSink.on_fd(spec["kv"][1], spec["kv"][0])] if "kv" in spec else []
        sinks += kv
        fpm = [JsonlFpmSink.on_fd(spec["fpm"][1], spec["fpm"][0])] if "fpm" in spec else []
        sinks += fpm
        serve(sys.stdin.buffer, SinkMerge(kv, fpm))
    except SinkError as exc:
        sys.stdout.write(str(exc))
        status = FAILED
    except Exception as exc:  # noqa: BLE001 - reported to the replaying process, not lost
        sys.stdout.write(f"the sink writer process failed: {type(exc).__name__}: {exc}")
        status = FAILED
    for sink in sinks:
        try:
            sink.close()
        except SinkError as exc:
            if not status:
                sys.stdout.write(str(exc))
                status = FAILED
    sys.stdout.flush()
    return status


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
