"""``servesim run`` end to end with the vLLM backend, and fidelity against the reference.

``data/<name>_report.json`` was produced once by the reference implementation (Dynamo's
mocker, through ``/work/shared/tools/peer_dynamo.py``; the exact command is stored in the file)
on a trace in ``data/``, with 2 workers, round robin, default vLLM engine arguments and
polynomial timing: ``peer_rr2`` has 200 single-turn requests with shared prefixes (also
replayed with a 40-block KV pool that forces preemptions, ``peer_rr2_pressure``),
``peer_sessions`` 30 three-turn sessions with 0, 25.5 and 300 ms delays, replayed in timestamp
mode, in concurrency mode (2 sessions) and with ``arrival_speedup_ratio`` 3 (``servesim_sets``
in each file). With deterministic routing every request's arrival, first-token and completion
times compare one to one.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from servesim.cli.main import main

DATA = Path(__file__).parent / "data"
pytest.importorskip("servesim_vllm")


def run_cli(*args: str) -> int:
    return main(["run", *args])


def test_default_scenario_prints_table_and_writes_identical_json(tmp_path, capsys):
    assert main([]) == 0
    out = capsys.readouterr().out
    assert "Serving Benchmark Result" in out and "Successful requests:" in out
    assert run_cli("--quiet", "--output-json", str(tmp_path / "a.json")) == 0
    assert run_cli("--quiet", "--output-json", str(tmp_path / "b.json")) == 0
    assert capsys.readouterr().out == ""
    a = (tmp_path / "a.json").read_bytes()
    assert run_cli("--json") == 0
    assert capsys.readouterr().out.encode() == a  # machine-readable stdout, same bytes
    assert a == (tmp_path / "b.json").read_bytes()
    rep = json.loads(a)
    assert rep["completed"] == 200 and rep["failed"] == 0
    assert rep["config"]["engine"]["backend"] == "vllm"
    assert rep["config"]["cluster"]["workers"] == 1
    assert rep["prefix_cache_hit_rate"] > 0.2  # the default scenario shares prefixes


@pytest.mark.parametrize(
    ("trace", "name"),
    [("peer_rr2", "peer_rr2"), ("peer_rr2", "peer_rr2_pressure"), ("peer_sessions", "peer_sessions"),
     ("peer_sessions", "peer_sessions_c2"), ("peer_sessions", "peer_sessions_s3")],
)
def test_trace_run_matches_reference_per_request(tmp_path, trace, name):
    out, per = tmp_path / "r.json", tmp_path / "req.jsonl"
    peer = json.loads((DATA / f"{name}_report.json").read_text())
    sets = [arg for s in peer.get("servesim_sets", []) for arg in ("--set", s)]
    code = run_cli("--trace", str(DATA / f"{trace}_trace.jsonl"), "--set", "cluster.workers=2",
                   "--set", "workload.trace.trace_block_size=64", *sets, "--quiet",
                   "--output-json", str(out), "--per-request", str(per))
    assert code == 0
    fields = peer["request_fields"]
    ref = [dict(zip(fields, r, strict=True)) for r in peer["requests"]]
    ours = sorted((json.loads(line) for line in per.read_text().splitlines()),
                  key=lambda r: (r["arrival_ms"], r["first_token_ms"], r["completion_ms"]))
    assert len(ours) == len(ref)
    for a, b in zip(ours, ref, strict=True):
        # later turns arrive when the previous turn finishes (+ delay): times, not only order
        assert a["arrival_ms"] == pytest.approx(b["arrival_time_ms"], abs=1e-3)
        assert a["first_token_ms"] == pytest.approx(b["first_token_ms"], abs=1e-3)
        assert a["completion_ms"] == pytest.approx(b["terminal_time_ms"], abs=1e-3)
        assert a["num_output_tokens"] == b["output_length"] == len(a["token_times_ms"])
        assert a["reused_input_tokens"] == b["reused_input_tokens"]
        assert a["worker"] == b["decode_worker_idx"]
    rep, s = json.loads(out.read_text()), peer["summary"]
    assert rep["completed"] == s["completed_requests"]
    assert rep["total_input_tokens"] == s["total_input_tokens"]
    assert rep["total_output_tokens"] == s["total_output_tokens"]
    assert rep["duration"] == pytest.approx(s["sim_duration_s"], rel=1e-6)
    assert rep["prefix_cache_hit_rate"] == pytest.approx(s["prefix_cache_hit_rate"], abs=1e-6)
    if "readmissions" in s:  # a small KV pool: every preemption is followed by one re-admission
        assert rep["num_preemptions"] == s["readmissions"] > 0
        assert rep["first_admission_prefix_cache_hit_rate"] == pytest.approx(
            s["first_admission_prefix_cache_hit_rate"], abs=1e-6)
    pairs = (("ttft", "ttft_ms"), ("tpot", "tpot_ms"), ("e2el", "e2e_ms"), ("ttst", "ttst_ms"))
    for ours_name, ref_name in pairs:
        for stat in ("mean", "median", "p90", "p99", "std"):
            assert rep[f"{stat}_{ours_name}_ms"] == pytest.approx(s[ref_name][stat], abs=1e-3)
    if "goodput" in s:  # the reference's itl SLA is servesim's tpot SLA: (e2e - ttft) / (n - 1)
        assert rep["goodput_completed"] == s["goodput"]["goodput_completed_requests"]
        assert rep["request_goodput"] == pytest.approx(s["goodput"]["goodput_request_throughput_rps"])
        assert rep["goodput_output_throughput"] == pytest.approx(
            s["goodput"]["goodput_output_throughput_tok_s"])
    # the reference sketches ITL percentiles (DDSketch, 0.1% relative accuracy); the mean is exact
    assert rep["mean_itl_ms"] == pytest.approx(s["itl_ms"]["mean"], abs=1e-3)
    assert rep["p99_itl_ms"] == pytest.approx(s["itl_ms"]["p99"], rel=2e-3)


def test_bad_trace_line_is_one_line_error(tmp_path, capsys):
    trace = tmp_path / "bad.jsonl"
    trace.write_text('{"timestamp": 0, "output_length": 2, "hash_ids": [1]}\n{"timestamp": 1}\n')
    assert run_cli("--trace", str(trace), "--quiet") == 2
    err = capsys.readouterr().err
    assert err == f"servesim: error: {trace}:2: missing required field 'hash_ids'\n"


def test_config_file_report_paths_and_unwritable_output(tmp_path, capsys):
    cfg = tmp_path / "sim.yaml"
    cfg.write_text(
        "workload:\n  synthetic: {num_requests: 20, rate: 50.0}\n"
        f"report:\n  output_json: {tmp_path / 'out' / 'r.json'}\n  percentiles: [50, 99.9]\n"
    )
    assert run_cli(str(cfg)) == 0
    printed = capsys.readouterr().out
    assert "P99.9 TTFT (ms):" in printed and "report written to" in printed
    rep = json.loads((tmp_path / "out" / "r.json").read_text())
    assert rep["completed"] == 20 and "p99.9_ttft_ms" in rep and "p90_ttft_ms" not in rep
    trace = tmp_path / "t.jsonl"
    trace.write_text('{"timestamp": 0, "output_length": 3, "hash_ids": [1, 2]}\n')
    assert run_cli(str(cfg), "--trace", str(trace), "--quiet", "--output-json", str(tmp_path / "t.json")) == 0
    rep = json.loads((tmp_path / "t.json").read_text())
    assert rep["completed"] == 1 and rep["config"]["workload"]["synthetic"] is None
    assert rep["config"]["workload"]["trace"]["path"] == str(trace)
    (tmp_path / "file").write_text("")
    assert run_cli(str(cfg), "--quiet", "--output-json", str(tmp_path / "file" / "x.json")) == 2
    assert "cannot write" in capsys.readouterr().err


def test_identical_bytes_across_processes_and_hash_seeds(tmp_path):
    import os
    import subprocess
    import sys

    outs = []
    for seed in ("1", "2"):
        out = tmp_path / f"r{seed}.json"
        per = tmp_path / f"q{seed}.jsonl"
        env = {**os.environ, "PYTHONHASHSEED": seed}
        subprocess.run(
            [sys.executable, "-m", "servesim.cli.main", "run", "--trace", str(DATA / "peer_sessions_trace.jsonl"),
             "--set", "cluster.workers=3", "--set", "cluster.router=kv",
             "--set", "workload.trace.trace_block_size=64", "--quiet",
             "--output-json", str(out), "--per-request", str(per)],
            check=True, env=env, timeout=120,
        )
        outs.append(out.read_bytes() + per.read_bytes())
    assert outs[0] == outs[1]
