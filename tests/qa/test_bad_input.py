"""Bad input never gives a traceback: one ``servesim: error:`` line, exit status 2, naming
the file:line or key path, the bad value and what was expected (issue 2 item 7, issue 4).

Each case runs ``servesim.cli.main.main`` in-process: a traceback would be an exception escaping
``main``; anything ``main`` turns into an exit status is what a user sees.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from servesim.cli.main import main
from servesim.plugins import servesim_version

VERSION = servesim_version()

GOOD = {"timestamp": 0, "input_length": 100, "output_length": 3, "hash_ids": [1]}
SMALL = ["--set", "workload.synthetic.num_requests=2"]


def fail(argv: list[str], capsys: pytest.CaptureFixture[str]) -> str:
    """Run the CLI, expect exit status 2 and exactly one error line; return that line."""
    rc = main(argv)
    err = capsys.readouterr().err
    assert rc == 2, err
    lines = err.splitlines()
    assert len(lines) == 1, err
    assert lines[0].startswith("servesim: error: ")
    return lines[0].removeprefix("servesim: error: ")


def write(tmp_path: Path, name: str, text: str | bytes) -> str:
    path = tmp_path / name
    if isinstance(text, bytes):
        path.write_bytes(text)
    else:
        path.write_text(text, encoding="utf-8")
    return str(path)


CONFIG_CASES = [
    # (yaml, fragments the message must contain, in order)
    ("engine: {max_num_seqz: 4}", ["engine.max_num_seqz: unknown key", "did you mean 'max_num_seqs'"]),
    ("engine: {vllm: {x: 1}}",
     ["engine.vllm.x: unknown key", "expected one of: async_scheduling, local_prefill_cadence, null_block"]),
    ("cluster: {wrkers: 2}", ["cluster.wrkers: unknown key", "'workers'"]),
    (
        "workload: {trace: {path: t.jsonl, bogus: 1}}",
        ["workload.trace.bogus: unknown key", "trace_block_size"],
    ),
    ("report: {sla_ttft: 1}", ["report.sla_ttft: unknown key", "'sla_ttft_ms'"]),
    ("sinks: {kv_event: []}", ["sinks.kv_event: unknown key", "'kv_events'"]),
    ("engine: {max_num_seqs: abc}", ["engine.max_num_seqs: expected an integer, got 'abc'"]),
    ("engine: {max_num_seqs: 1.5}", ["engine.max_num_seqs: expected an integer, got 1.5"]),
    (
        "engine: {enable_prefix_caching: 'no'}",
        ["engine.enable_prefix_caching: expected true or false, got 'no'"],
    ),
    (
        "engine: {preemption_mode: random}",
        ["engine.preemption_mode: expected one of 'lifo', 'fifo', got 'random'"],
    ),
    ("engine: {num_gpu_blocks: -5}", ["engine.num_gpu_blocks: expected an integer in [1, 16777216], got -5"]),
    ("engine: {speedup_ratio: .nan}", ["engine.speedup_ratio: expected a finite number >= 0, got nan"]),
    ("engine: 5", ["engine: expected a mapping, got 5"]),
    (
        "engine: {trtllm: {capacity_scheduler_policy: x}}",
        ["engine.trtllm.capacity_scheduler_policy", "got 'x'"],
    ),
    (
        "engine: {worker_type: prefill}",
        ["engine.worker_type: expected 'aggregated' without a prefill/decode split, got 'prefill'"],
    ),
    (
        "engine: {timing_model: {type: interpolated, profile: nope.json}}",
        ["engine.timing_model.profile: timing profile 'nope.json'"],
    ),
    (
        "cluster: {router: kv, router_config: {overlap_score_weight: .nan}}",
        ["cluster.router_config.overlap_score_weight: expected a number, got nan"],
    ),
    (
        "engine: {backend: sglang, sglang: {schedule_conservativeness: .nan}}",
        ["engine.sglang.schedule_conservativeness: expected a number, got nan"],
    ),
    ("engine: {aic_nextn: 6}", ["engine.aic_nextn: expected an integer in [1, 5] or null, got 6"]),
    # 1e9 blocks used to exhaust memory building the pool, with no message at all
    ("engine: {num_gpu_blocks: 1000000000}",
     ["engine.num_gpu_blocks: expected an integer in [1, 16777216], got 1000000000"]),
    ("engine: {kv_transfer_bandwidth: 1.0e-300}",
     ["engine.kv_transfer_bandwidth: expected a finite number >= 1e-6 (GB/s) or null, got 1e-300"]),
    ("engine: {aic_mtp_seed: -1}", ["engine.aic_mtp_seed: expected an integer >= 0, got -1"]),
    ("engine: {aic_nextn_accept_rates: '0.5'}", ["engine.aic_nextn_accept_rates: set without aic_nextn"]),
    (
        "engine: {aic_nextn: 2, decode_speedup_ratio: 2}",
        ["engine.decode_speedup_ratio: expected 1.0 when aic_nextn is set, got 2.0"],
    ),
    (
        "engine: {native_host_offload: {num_host_blocks: 8}}",
        ["engine.native_host_offload: needs engine.kv_bytes_per_token"],
    ),
    (
        "engine: {kv_bytes_per_token: 2, native_host_offload: {num_host_blocks: 0}}",
        ["engine.native_host_offload.num_host_blocks: expected an integer >= 1, got 0"],
    ),
    (
        "engine: {native_host_offload: {num_host_blocks: 8, bogus: 1}}",
        ["engine.native_host_offload.bogus: unknown key"],
    ),
    ("cluster: {workers: -1}", ["cluster.workers: expected an integer >= 0, got -1"]),
    ("cluster: {router_config: {x: 1}}", ["cluster.router_config.x: unknown key; router 'round_robin'"]),
    ("workload: {seed: -1}", ["workload.seed: expected an integer >= 0, got -1"]),
    ("workload: {concurrency: 0}", ["workload.concurrency: expected an integer >= 1 or null, got 0"]),
    (
        "workload: {arrival_speedup_ratio: 0}",
        ["workload.arrival_speedup_ratio: expected a finite number >= 1e-6"],
    ),
    (
        "workload: {synthetic: {input_length: 'uniform:5'}}",
        ["workload.synthetic.input_length: bad length spec"],
    ),
    (
        "workload: {synthetic: {input_length: 'fixed:0'}}",
        ["input_length: bad length spec 'fixed:0': N must be an integer in [1, 16777216]"],
    ),
    ("workload: {synthetic: {input_length: 'normal:nan:1'}}", ["expected finite numbers, got 'nan'"]),
    (
        "workload: {synthetic: {output_length: 'uniform:1:1e30'}}",
        ["output_length: bad length spec 'uniform:1:1e30': need integers 0 <= LO <= HI <= 16777216"],
    ),
    (
        "workload: {synthetic: {num_requests: -1}}",
        ["workload.synthetic.num_requests: expected an integer in [0, 100000000], got -1"],
    ),
    ("report: {percentiles: 50}", ["report.percentiles: expected a list, got 50"]),
    ("report: {percentiles: [50, 101]}", ["report.percentiles[1]: expected a number in [0, 100], got 101.0"]),
    ("report: {output_json: 5}", ["report.output_json: expected a string, got 5"]),
    ("sinks: {kv_events: {type: jsonl}}", ["sinks.kv_events: expected a list, got {'type': 'jsonl'}"]),
    ("sinks: {kv_events: [jsonl]}", ["sinks.kv_events[0]: expected a mapping, got 'jsonl'"]),
    (
        "sinks: {fpm: [{type: nope}]}",
        ["sinks.fpm[0].type: unknown fpm_sink 'nope'; installed: ", "jsonl, memory"],
    ),
    ("engine: {max_num_seqs: [1", [":1: invalid YAML", "expected ',' or ']'"]),
    ("engine: {a: 1}\nengine: {b: 2}", [":2: invalid YAML", "duplicate key 'engine'"]),
    ("[1, 2]", ["expected a mapping of sections (engine, cluster, workload, report, sinks), got [1, 2]"]),
    ("42", ["expected a mapping of sections", "got 42"]),
]


@pytest.mark.parametrize(("text", "fragments"), CONFIG_CASES, ids=[c[0][:40] for c in CONFIG_CASES])
def test_config_errors(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], text: str, fragments: list[str]
) -> None:
    path = write(tmp_path, "sim.yaml", text)
    for command in ("run", "validate"):
        message = fail([command, path], capsys)
        assert message.startswith(path)
        pos = 0
        for fragment in fragments:
            found = message.find(fragment, pos)
            assert found >= 0, (fragment, message)
            pos = found


def test_yaml_exponent_floats_are_numbers(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """``1e3`` is a number, as in YAML 1.2 and JSON (PyYAML alone reads it as a string)."""
    path = write(
        tmp_path, "sim.yaml", "workload: {arrival_speedup_ratio: 1e3}\nengine: {speedup_ratio: 1.5e0}"
    )
    assert main(["validate", path]) == 0
    capsys.readouterr()
    message = fail(["validate", path, "--set", "engine.max_num_seqs=1e3"], capsys)
    assert message == "--set engine.max_num_seqs=1e3: engine.max_num_seqs: expected an integer, got 1000.0"


SET_CASES = [
    (
        "engine.max_num_seqs",
        "--set: expected KEY=VALUE with a dotted key like engine.max_num_seqs=64, got 'engine.max_num_seqs'",
    ),
    ("=3", "--set: expected KEY=VALUE"),
    ("engine.foo=1", "--set engine.foo=1: engine.foo: unknown key"),
    ("foo.bar=1", "--set foo.bar=1: foo: unknown key"),
    (
        "engine.max_num_seqs=abc",
        "--set engine.max_num_seqs=abc: engine.max_num_seqs: expected an integer, got 'abc'",
    ),
    ("engine.max_num_seqs=[1", "--set engine.max_num_seqs=[1: invalid YAML"),
    ("engine.backend=nope", "--set engine.backend=nope: engine.backend: unknown backend 'nope'; installed: "),
    (
        "cluster.router=nope",
        "--set cluster.router=nope: cluster.router: unknown router 'nope'; installed: kv, ",
    ),
    (
        "engine.timing_model.type=nope",
        "engine.timing_model.type: unknown timing_model 'nope'; installed: aic, fixed",
    ),
    ("engine.eviction_policy=nope", "engine.eviction_policy: unknown eviction_policy 'nope'; installed: lfu, lineage, lru, multi_lru"),
    (
        "sinks.kv_events=[{type: nope}]",
        "sinks.kv_events[0].type: unknown kv_event_sink 'nope'; "
        "installed: filter, jsonl, memory, sample, tee",
    ),
    ("sinks.kv_events.0.path=x", "sinks.kv_events: expected a list, got {'0': {'path': 'x'}}"),
    ("workload.trace.format=nope", "workload.trace.format: unknown trace_format 'nope'; installed: "),
]


@pytest.mark.parametrize(("item", "expected"), SET_CASES, ids=[c[0] for c in SET_CASES])
def test_set_errors(tmp_path: Path, capsys: pytest.CaptureFixture[str], item: str, expected: str) -> None:
    trace = write(tmp_path, "t.jsonl", json.dumps(GOOD) + "\n")
    sets = ["--set", f"workload.trace.path={trace}"] if item.startswith("workload.trace") else []
    assert expected in fail(["run", *sets, "--set", item], capsys)


def trace_line(**fields: object) -> str:
    return json.dumps({**GOOD, **fields})


TRACE_CASES: list[tuple[str | bytes, str]] = [
    ('{"timestamp": 0, "output_length": 5, "hash_ids": [1]\n', ":1: invalid JSON: Expecting ',' delimiter"),
    (trace_line() + "\n[1, 2]\n", ":2: expected a JSON object, got list"),
    ('{"timestamp": 0, "hash_ids": [1]}\n', ":1: missing required field 'output_length'"),
    (trace_line(output_length=-5), ":1: 'output_length' must be a non-negative integer, got -5"),
    (trace_line(input_length=-5), ":1: 'input_length' must be a non-negative integer, got -5"),
    (trace_line(hash_ids=7), ":1: 'hash_ids' must be a list of integers, got int"),
    (trace_line(hash_ids=[1, "a"]), ":1: 'hash_ids[1]' must be a non-negative integer, got 'a'"),
    (trace_line(hash_ids=[1.5]), ":1: 'hash_ids[0]' must be a non-negative integer, got 1.5"),
    (trace_line(output_length=5.0), ":1: 'output_length' must be a non-negative integer, got 5.0"),
    (trace_line(delay=100), ":1: a non-zero 'delay' is not allowed on a session's first turn"),
    (trace_line(timestamp="abc"), ":1: 'timestamp' must be a finite number, got 'abc'"),
    (b"\xff\xfe\x00garbage\n", ":1: not UTF-8 text: byte 0xff at column 1"),
    ((trace_line() + "\n" + '{"session_id": "\xe9"}\n').encode("latin-1"), ":2: not UTF-8 text: byte 0xe9"),
    (trace_line() + "\n" + "\u2603\u2603\n", ":2: invalid JSON: Expecting value (column 1)"),
    (
        trace_line(timestamp=1e308) + "\n" + trace_line(timestamp=-1e308) + "\n",
        ":2: timestamp -1e+308 is too far",
    ),
    (
        trace_line(session_id="s")
        + "\n"
        + trace_line(session_id="s", delay=1e308)
        + "\n"
        + trace_line(session_id="s", delay=1e308)
        + "\n",
        ":3: the delays of session 's' add up",
    ),
]


@pytest.mark.parametrize(
    ("text", "expected"), TRACE_CASES, ids=[f"trace{i}" for i in range(len(TRACE_CASES))]
)
def test_trace_errors(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], text: str | bytes, expected: str
) -> None:
    path = write(tmp_path, "t.jsonl", text)
    assert fail(["run", "--trace", path], capsys).startswith(path + expected)


def test_trace_path_errors(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    missing = str(tmp_path / "nope.jsonl")
    assert (
        fail(["run", "--trace", missing], capsys)
        == f"{missing}: cannot read trace: No such file or directory"
    )
    assert fail(["run", "--trace", str(tmp_path)], capsys) == f"{tmp_path}: cannot read trace: Is a directory"
    config = write(tmp_path, "sim.yaml", f"workload: {{trace: {{path: {missing}}}}}")
    assert (
        fail(["validate", config], capsys) == f"{config}: workload.trace.path: no such trace file {missing!r}"
    )


def test_missing_or_directory_config(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    missing = str(tmp_path / "nope.yaml")
    assert fail(["run", missing], capsys) == f"{missing}: cannot read config file: No such file or directory"
    assert fail(["run", str(tmp_path)], capsys) == f"{tmp_path}: cannot read config file: Is a directory"


def test_bom_blank_and_crlf_traces_are_read(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """A UTF-8 byte-order mark (Windows editors), CRLF line ends, blank and huge blank lines."""
    body = trace_line() + "\r\n\r\n" + " " * 100_000 + "\r\n" + trace_line(timestamp=5) + "\r\n"
    path = write(tmp_path, "t.jsonl", b"\xef\xbb\xbf" + body.encode())
    assert main(["run", "--trace", path, "--json"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert (report["num_requests"], report["completed"], report["total_output_tokens"]) == (2, 2, 6)


def test_unwritable_outputs_fail_before_the_run(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    blocker = tmp_path / "file"
    blocker.write_text("x")
    bad = str(blocker / "sub" / "x.json")  # its folder would have to be inside a file
    assert fail(["run", *SMALL, "--output-json", bad], capsys) == (
        f"--output-json: cannot write {bad!r}: its folder {str(blocker)!r} is a file"
    )
    assert fail(["run", *SMALL, "--per-request", str(tmp_path)], capsys) == (
        f"--per-request: cannot write {str(tmp_path)!r}: it is a directory"
    )
    assert fail(["run", *SMALL, "--set", f"report.output_json={bad}"], capsys).startswith(
        f"report.output_json: cannot write {bad!r}"
    )
    for kind in ("kv_events", "fpm"):
        sink = f"sinks.{kind}=[{{type: jsonl, path: {bad}}}]"
        assert fail(["run", *SMALL, "--set", sink], capsys).endswith(
            f"{bad!r}: cannot open: Not a directory (plugin servesim.builtins.sinks from servesim {VERSION})"
        )


def test_missing_output_folders_are_created(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "a" / "b"
    assert (
        main(
            [
                "run",
                *SMALL,
                "--quiet",
                "--output-json",
                str(out / "r.json"),
                "--per-request",
                str(out / "p.jsonl"),
            ]
        )
        == 0
    )
    assert json.loads((out / "r.json").read_text())["completed"] == 2
    assert len((out / "p.jsonl").read_text().splitlines()) == 2


def test_validate_reads_the_trace(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """``validate`` finds a malformed trace line (file:line) without running anything."""
    trace = write(tmp_path, "t.jsonl", trace_line() + "\n" + trace_line(hash_ids=[1, "a"]) + "\n")
    config = write(tmp_path, "sim.yaml", f"workload: {{trace: {{path: {trace}}}}}")
    assert (
        fail(["validate", config], capsys)
        == f"{trace}:2: 'hash_ids[1]' must be a non-negative integer, got 'a'"
    )
    assert fail(["validate", config, "--set", f"workload.trace.path={tmp_path}"], capsys) == (
        f"{config}: workload.trace.path: {str(tmp_path)!r} is a directory, not a trace file"
    )
    write(tmp_path, "t.jsonl", trace_line() + "\n")
    assert main(["validate", config]) == 0
    assert capsys.readouterr().out.endswith("workload trace (format mooncake)\n")
