"""``sinks.writer: process``: the merge buffer and the JSONL sinks' lines in a writer process
write the same bytes, and fail with the same messages, as they do in the replaying process."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from servesim.config.loader import load_config
from servesim.config.sections import SinkWriterMode
from servesim.contract import ClearedBlocks, ForwardPassMetrics, KvBlock, KvEvent, RemovedBlocks, StoredBlocks
from servesim.fast import sink_offload
from servesim.fast.fpm_runs import FpmRun
from servesim.fast.sink_merge import SinkMerge
from servesim.fast.sink_offload import AUTO_MIN_REQUESTS, SinkWriterProcess, can_offload, writes_in_process
from servesim.kv.event_records import RemovedRun, StoredRun
from servesim.replay.runner import simulate
from servesim.report.summary import dumps
from servesim.sinks.base import SinkError
from servesim.sinks.builtin import (
    JsonlFpmSink,
    JsonlKvEventSink,
    JsonlKvSinkConfig,
    JsonlSinkConfig,
    MemoryKvEventSink,
)

_BASE = {"worker_id": 1, "dp_rank": 0, "num_prefill_requests": 0, "sum_prefill_tokens": 0,
         "var_prefill_length": 0.0, "sum_prefill_kv_tokens": 0, "num_queued_prefill": 2,
         "sum_queued_prefill_tokens": 900, "var_queued_prefill_length": -0.0,
         "num_queued_decode": 0, "sum_queued_decode_kv_tokens": 0,
         "var_queued_decode_kv_tokens": 12.5}


def _calls(m: Any, *, nan_run: bool = False) -> None:
    """One stream of every kind of call the driver makes on a merge."""
    big = 2**64 - 1
    m.kv(1, 10.0, 4.0, [RemovedRun(0, 0, [big, 5, 6]), StoredRun(3, 0, None, [7, 8], [9, 9])])
    m.kv(0, 8.0, 2.0, [StoredRun(0, 0, 11, (12,), (13,), 0), RemovedRun(1, 0, [14])])
    m.kv(2, 8, 2, [KvEvent(0, 1, StoredBlocks(None, (KvBlock(5, 6, (1, 2)),))),  # token ids
                   RemovedRun(1, 1, [15])])
    m.kv(2, 9.0, 8.0, [KvEvent(2, 0, RemovedBlocks((16,), medium="cpu")), KvEvent(3, 0, ClearedBlocks())])
    m.fpm(1, 10.0, 4.0, ForwardPassMetrics(worker_id=1, counter_id=7, duration_ms=6.0,
                                           var_decode_kv_tokens=1e-05))
    durations = [1.5, float("nan") if nan_run else 2.25, 1e16]
    m.fpm_run_of(0, [9.0, 10.0, 12.0], 7.5, FpmRun(_BASE, 4, [3, 3, 2], [3000, 3003, 2002],
                                                 [0.25, 0.25, -0.0], durations))
    m.release(9.5)
    m.fpm(0, 12.0, 10.0, ForwardPassMetrics(worker_id=0, counter_id=20, duration_ms=2.0))
    m.kv(3, 12.0, 10.0, [RemovedRun(7, 0, list(range(100, 140)))])
    m.fpm_run_of(3, [13, 14.5], 12.0, FpmRun({**_BASE, "worker_id": 3}, 0, [1, 1], [10, 11],
                                             [0.0, 0.0], [1.0, 1.5]))
    m.release(13.0)
    m.release_all()
    m.finish()


def _sinks(folder: Path) -> tuple[JsonlKvEventSink, JsonlFpmSink]:
    folder.mkdir()
    return (JsonlKvEventSink(JsonlKvSinkConfig(str(folder / "kv.jsonl"))),
            JsonlFpmSink(JsonlSinkConfig(str(folder / "fpm.jsonl"))))


def test_a_writer_process_writes_the_bytes_of_the_merge_here(tmp_path: Path) -> None:
    kv, fpm = _sinks(tmp_path / "here")
    _calls(SinkMerge([kv], [fpm]))
    kv.close()
    fpm.close()
    kv2, fpm2 = _sinks(tmp_path / "there")
    writer = SinkWriterProcess(kv2, fpm2)
    _calls(writer)
    kv2.close()
    fpm2.close()
    for name in ("kv.jsonl", "fpm.jsonl"):
        here = (tmp_path / "here" / name).read_bytes()
        assert (tmp_path / "there" / name).read_bytes() == here
    lines = (tmp_path / "here" / "kv.jsonl").read_text().splitlines()
    assert len(lines) == (3 + 1) + 2 + 2 + 2 + 40  # one line per event, records expanded
    assert lines[0].startswith('{"worker": 0, "dp_rank": 0, "at_ms": 8.0, "event_id": 0, ')
    assert '"medium": "cpu"' in (tmp_path / "here" / "kv.jsonl").read_text()
    fpm_lines = (tmp_path / "here" / "fpm.jsonl").read_text().splitlines()
    assert len(fpm_lines) == 1 + 3 + 1 + 2
    assert ['"wall_time": 10000000000000.0' in line for line in fpm_lines].count(True) == 1  # 1e16 ms


def test_only_one_built_in_jsonl_sink_a_stream_goes_to_a_writer_process(tmp_path: Path) -> None:
    kv, fpm = _sinks(tmp_path / "s")

    class Mine(JsonlKvEventSink):
        pass

    mine = Mine(JsonlKvSinkConfig(str(tmp_path / "mine.jsonl")))
    assert can_offload([kv], [fpm]) and can_offload([], [fpm]) and can_offload([kv], [])
    assert not can_offload([], [])
    assert not can_offload([kv, kv], [fpm])
    assert not can_offload([mine], [fpm])
    assert not can_offload([MemoryKvEventSink()], [fpm])
    for s in (kv, fpm, mine):
        s.close()


def test_auto_uses_a_writer_process_for_large_replays_on_two_cpus(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(sink_offload, "usable_cpus", lambda: 2)
    assert writes_in_process(SinkWriterMode.AUTO, AUTO_MIN_REQUESTS)
    assert not writes_in_process(SinkWriterMode.AUTO, AUTO_MIN_REQUESTS - 1)
    assert not writes_in_process(SinkWriterMode.INLINE, 10**6)
    assert writes_in_process(SinkWriterMode.PROCESS, 1)
    monkeypatch.setattr(sink_offload, "usable_cpus", lambda: 1)
    assert not writes_in_process(SinkWriterMode.AUTO, 10**6)


def test_a_format_failure_in_the_writer_process_has_the_message_it_has_here(tmp_path: Path) -> None:
    kv, fpm = _sinks(tmp_path / "here")
    with pytest.raises(SinkError) as here:
        _calls(SinkMerge([kv], [fpm]), nan_run=True)
    kv.close()
    fpm.close()
    kv2, fpm2 = _sinks(tmp_path / "there")
    with pytest.raises(SinkError) as there:
        _calls(SinkWriterProcess(kv2, fpm2), nan_run=True)
    kv2.close()
    fpm2.close()
    assert str(there.value).replace("/there/", "/here/") == str(here.value)
    assert str(here.value).startswith("sink JsonlFpmSink failed at 10.0 ms: ")
    assert "Out of range float values are not JSON compliant: nan" in str(here.value)


@pytest.mark.skipif(not Path("/dev/full").exists(), reason="needs /dev/full")
def test_a_write_failure_in_the_writer_process_has_the_message_it_has_here() -> None:
    def failure(merge_of: Any) -> str:
        kv = JsonlKvEventSink(JsonlKvSinkConfig("/dev/full"))
        try:
            with pytest.raises(SinkError) as err:
                m = merge_of(kv)
                m.kv(0, 1.0, 0.0, [RemovedRun(0, 0, list(range(5000)))])  # more than a buffer
                m.release_all()
                m.finish()
        finally:
            try:
                kv.close()
            except SinkError:  # what it still buffers cannot be written either
                pass
        return str(err.value)

    here = failure(lambda kv: SinkMerge([kv], []))
    there = failure(lambda kv: SinkWriterProcess(kv, None))
    assert here == there
    assert here.startswith("sink JsonlKvEventSink failed at 1.0 ms: jsonl kv-event sink '/dev/full': "
                           "cannot write: ")
    assert "No space left on device" in here


def test_a_sink_handed_to_a_writer_process_writes_nothing_itself(tmp_path: Path) -> None:
    kv, fpm = _sinks(tmp_path / "s")
    writer = SinkWriterProcess(kv, fpm)
    with pytest.raises(SinkError, match="its lines go to a writer process"):
        kv.write_encoded("x\n")
    kv.close()  # ends the writer process, which wrote nothing
    fpm.close()
    writer.finish()  # once only
    assert (tmp_path / "s" / "kv.jsonl").read_bytes() == b""


def _replay(tmp_path: Path, name: str, writer: str, backend: str = "vllm") -> tuple[str, bytes, bytes, int]:
    out = tmp_path / name
    capacity = ["engine.num_gpu_blocks=9600", "engine.block_size=1"] if backend == "sglang" else [
        "engine.num_gpu_blocks=600", "engine.block_size=16"]
    sets = [
        f"engine.backend={backend}", *capacity,
        "cluster.workers=3", "cluster.router=kv",
        "workload.synthetic.num_requests=120", "workload.synthetic.rate=40",
        "workload.synthetic.input_length=uniform:100:900", "workload.synthetic.output_length=uniform:20:120",
        f'sinks.kv_events=[{{type: jsonl, path: "{out}/kv.jsonl"}}]',
        f'sinks.fpm=[{{type: jsonl, path: "{out}/fpm.jsonl"}}]',
        f"sinks.writer={writer}",
    ]
    res = simulate(load_config(None, sets))
    report = dict(res.report)
    report.pop("config", None)
    return dumps(report), (out / "kv.jsonl").read_bytes(), (out / "fpm.jsonl").read_bytes(), res.passes


@pytest.mark.parametrize("backend", ["vllm", "sglang", "trtllm"])
def test_a_replay_with_a_writer_process_writes_the_files_and_report_of_one_without(
        tmp_path: Path, backend: str) -> None:
    inline = _replay(tmp_path, "inline", "inline", backend)
    process = _replay(tmp_path, "process", "process", backend)
    assert process == inline
    kv_text = inline[1].decode()
    assert kv_text.count("BlockRemoved") > 100 and kv_text.count("BlockStored") > 100  # evictions
    assert inline[2].decode().count("\n") == inline[3]  # one FPM line a pass


def test_a_writer_process_writes_the_same_files_for_runs_and_for_stepping(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    runs = _replay(tmp_path, "runs", "process")
    monkeypatch.setenv("SERVESIM_RUNS", "0")
    stepping = _replay(tmp_path, "stepping", "process")
    assert stepping[1:] == runs[1:]


def test_the_cli_reports_a_writer_process_failure_as_one_line(tmp_path: Path) -> None:
    if not Path("/dev/full").exists():
        pytest.skip("needs /dev/full")
    results = []
    for writer in ("inline", "process"):
        proc = subprocess.run(
            [sys.executable, "-c", "import sys; from servesim.cli.main import main; sys.exit(main())",
             "run", "--quiet", "--set", "cluster.workers=2",
             "--set", "workload.synthetic.num_requests=40",
             "--set", 'sinks.kv_events=[{type: jsonl, path: "/dev/full"}]',
             "--set", f"sinks.writer={writer}"],
            capture_output=True, text=True, timeout=120, check=False)
        results.append((proc.returncode, proc.stderr))
    assert results[0] == results[1]
    code, err = results[0]
    assert code == 1 and "Traceback" not in err
    assert err.count("\n") == 1 and "No space left on device" in err
    assert err.startswith("servesim: error: sink JsonlKvEventSink failed at ")


def test_a_writer_process_that_cannot_start_leaves_the_sinks_their_files(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    kv, fpm = _sinks(tmp_path / "s")

    def refuse(*_args: object, **_kwargs: object) -> None:
        raise OSError("no more processes")

    monkeypatch.setattr(sink_offload.subprocess, "Popen", refuse)
    with pytest.raises(SinkError, match="cannot start the writer process: no more processes"):
        SinkWriterProcess(kv, fpm)
    m = SinkMerge([kv], [fpm])  # the replay could still write them itself
    m.kv(0, 1.0, 0.0, [RemovedRun(0, 0, [1])])
    m.release_all()
    kv.close()
    fpm.close()
    assert (tmp_path / "s" / "kv.jsonl").read_text() == (
        '{"worker": 0, "dp_rank": 0, "at_ms": 1.0, "event_id": 0, "type": "BlockRemoved", '
        '"block_hashes": [1]}\n')
