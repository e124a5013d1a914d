"""Benchmark bookkeeping: ``benchmarks/perf_cases.config_mismatches`` reads the reference's
launch configuration the way ``peer_dynamo.py`` reports it (one ``engine`` for an aggregated
replay, one per role and worker counts by role for a prefill/decode split), and
``benchmarks/run.round_ratios`` pairs each round's two runs, and ``benchmarks/bench_sinks``
gives each sink configuration's ratio to the sink-free run round by round, replays its
unformatted configuration with the same passes and report, writing no text, and replays
another checkout in the same rounds with one paired difference a round. Its
``--instructions`` mode reads callgrind's count from its summary, counts a replay as the full
child less the child stopped before the replay (both with ``PYTHONHASHSEED=0``), names a
failed child, and gives each configuration's ratio to ``none``; valgrind itself is stood in
for by a script, so CI needs none."""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


def _bench_module(name: str):
    """``benchmarks/<name>.py``, loaded with the benchmarks folder on the path for its imports."""
    sys.path.insert(0, str(ROOT / "benchmarks"))
    try:
        spec = importlib.util.spec_from_file_location(f"bench_{name}", ROOT / "benchmarks" / f"{name}.py")
        mod = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(mod)
        return mod
    finally:
        sys.path.remove(str(ROOT / "benchmarks"))


def _perf_cases():
    return _bench_module("perf_cases")


def _engine(pc, **changes):
    base = {k: i for i, k in enumerate(pc.CHECKED_ENGINE_KEYS)}
    return {**base, **changes}


def _mine(pc, cluster, **engine_changes):
    return {"config": {"engine": _engine(pc, **engine_changes), "cluster": cluster,
                       "workload": {"trace": {"trace_block_size": pc.TRACE_BLOCK_SIZE}}}}


def test_aggregated_matches_and_names_a_difference():
    pc = _perf_cases()
    (case,) = pc.select_cases(["vllm-4w-kv"], False, None)
    peer = {"engine_args": {"engine": _engine(pc)}, "workers": {"aggregated": 4},
            "router_mode": "kv_router"}
    assert pc.config_mismatches(case, _mine(pc, {"workers": 4, "router": "kv"}), peer) == []
    mine = _mine(pc, {"workers": 3, "router": "kv"}, block_size=99)
    assert pc.config_mismatches(case, mine, peer) == ["block_size: 99 != 1", "workers: 3 != 4"]


def test_split_is_checked_role_by_role():
    pc = _perf_cases()
    (case,) = pc.select_cases(["vllm-disagg-2p4d-kv"], False, None)
    peer = {"engine_args": {"prefill": {"engine": _engine(pc)},
                            "decode": {"engine": _engine(pc, max_num_seqs=7)}},
            "workers": {"prefill": 2, "decode": 4}, "router_mode": "kv_router"}
    mine = _mine(pc, {"workers": 1, "prefill_workers": 2, "decode_workers": 4, "router": "kv"})
    idx = pc.CHECKED_ENGINE_KEYS.index("max_num_seqs")
    assert pc.config_mismatches(case, mine, peer) == [f"decode.max_num_seqs: {idx} != 7"]
    peer["workers"] = {"prefill": 1, "decode": 4}
    assert pc.config_mismatches(case, mine, peer)[-1] == "prefill_workers: 2 != 1"


def test_round_ratios_pair_the_runs_of_each_round():
    run = _bench_module("run")
    mine = [{"wall_s": 2.0}, {"error": "exit 1"}, {"wall_s": 4.0}]
    theirs = [{"wall_s": 1.0}, {"wall_s": 1.0}, {"wall_s": 3.0}]
    assert run.round_ratios(mine, theirs) == [0.5, 0.75]
    row = {"case": "c", "round_ratios": [0.5, 0.75, 0.6]}
    assert run._notes([row]) == ["- c: ratio by round 0.50x, 0.75x, 0.60x (median 0.60x)"]


def test_sink_ratios_by_round_skip_rounds_missing_either_run():
    bs = _bench_module("bench_sinks")
    rounds = [{"none": 2.0, "jsonl-kv": 3.0, "jsonl-both": 3.5},
              {"none": 2.5, "jsonl-both": 4.0},  # jsonl-kv failed this round
              {"jsonl-kv": 3.0, "jsonl-both": 3.0},  # so did the sink-free run
              {"none": 1.0, "jsonl-kv": 1.25, "jsonl-both": 1.5}]
    assert bs.round_lines(["none", "jsonl-kv", "jsonl-both", "zmq-kv"], rounds) == [
        "- jsonl-kv: CPU x none by round 1.50, 1.25 (median 1.38)",
        "- jsonl-both: CPU x none by round 1.75, 1.60, 1.50 (median 1.60)",
    ]
    assert bs.round_lines(["none", "jsonl-both"], rounds[:1], "wall") == [
        "- jsonl-both: wall x none by round 1.75 (median 1.75)"]


def _child(bs, trace: Path, out: Path, unformatted: bool) -> dict:
    """``bench_sinks.run_once`` on ``trace`` with both JSONL sinks writing under ``out``, on
    two KV-routed workers (so the sink merge buffer orders their lines)."""
    out.mkdir()
    sets = ["cluster.workers=2", "cluster.router=kv", "engine.num_gpu_blocks=64",
            *bs.sink_sets("jsonl-both", out)]
    res = bs.run_once(trace, sets, out, unformatted=unformatted, timeout=120)
    assert "error" not in res, res
    return res


def test_unformatted_sinks_replay_the_same_run_and_write_no_text(tmp_path):
    """``bench_sinks``' ``jsonl-both-unformatted``: the same passes and report as with the
    formatters, the sink files opened but empty (the formatted run's are not)."""


    lines = [json.dumps({"timestamp": 40 * i, "input_length": 300 + 17 * (i % 5), "output_length": 20 + i % 7,
                         "hash_ids": [i % 3, 10 + i % 4, 100 + i]}) for i in range(30)]
    trace = tmp_path / "t.jsonl"
    trace.write_text("\n".join(lines) + "\n")
    bs = _bench_module("bench_sinks")
    formatted = _child(bs, trace, tmp_path / "formatted", unformatted=False)
    bare = _child(bs, trace, tmp_path / "bare", unformatted=True)
    assert bare["passes"] == formatted["passes"] > 30
    for res in (formatted, bare):
        res["report"].pop("config")
    assert bare["report"] == formatted["report"]
    assert bare["report"]["completed"] == 30
    kv, fpm = (tmp_path / "formatted" / "kv.jsonl"), (tmp_path / "formatted" / "fpm.jsonl")
    assert len(fpm.read_text().splitlines()) == formatted["passes"]
    assert kv.read_text().count('"type": "BlockStored"') > 0
    assert (tmp_path / "bare" / "kv.jsonl").read_bytes() == b""
    assert (tmp_path / "bare" / "fpm.jsonl").read_bytes() == b""
    assert bs.sink_sets("jsonl-both-unformatted", tmp_path) == bs.sink_sets("jsonl-both-inline", tmp_path)
    assert bs.sink_sets("jsonl-both-inline", tmp_path) == [*bs.sink_sets("jsonl-both", tmp_path),
                                                           "sinks.writer=inline"]
    assert bs.UNFORMATTED == {"jsonl-both-unformatted"}


def test_paired_differences_skip_rounds_missing_either_tree():
    bs = _bench_module("bench_sinks")
    mine = [{"none": 2.0, "jsonl-both": 3.5}, {"none": 2.5}, {"none": 2.2, "jsonl-both": 3.0}]
    theirs = [{"none": 2.25, "jsonl-both": 3.0}, {"none": 2.5, "jsonl-both": 3.9}, {"none": 2.0}]
    assert bs.paired_lines(["none", "jsonl-both", "zmq-kv"], mine, theirs) == [
        "- none: installed - checkout by round -0.250, +0.000, +0.200 s (median +0.000 s)",
        "- jsonl-both: installed - checkout by round +0.500 s (median +0.500 s)",
    ]


def test_against_a_checkout_replays_both_trees_in_every_round(tmp_path, capsys):
    """``bench_sinks --against CHECKOUT`` (here the repository itself): a table for each
    tree with the same passes, and one paired difference a round."""
    bs = _bench_module("bench_sinks")
    assert bs.main(["-n", "20", "--repeat", "2", "--sinks", "none,jsonl-kv", "--against", str(ROOT),
                    "--trace-dir", str(tmp_path)]) == 0
    out = capsys.readouterr().out
    assert out.startswith("case vllm-4w-kv, 20 requests, fastest of 2\n")
    assert "installed packages:\n" in out and f"checkout {ROOT}:\n" in out
    rows = [line.split(" | ") for line in out.splitlines() if line.startswith("| jsonl-kv |")]
    assert len(rows) == 2 and rows[0][6] == rows[1][6] and int(rows[0][6].rstrip(" |")) > 20  # passes
    paired = [line for line in out.splitlines() if "installed - checkout by round" in line]
    assert [line.split(":")[0] for line in paired] == ["- none", "- jsonl-kv"]
    assert all(line.split("by round ")[1].split(" s (")[0].count(", ") == 1 for line in paired)
    with pytest.raises(SystemExit) as exc:  # not a checkout: one line, no replay
        bs.main(["--against", str(tmp_path), "--repeat", "1"])
    assert exc.value.code == 2
    assert "not a servesim checkout" in capsys.readouterr().err

_SUMMARY = """==31337== Callgrind, a call-graph generating cache profiler
==31337== Events    : Ir
==31337== Collected : 13314784547
==31337==
==31337== I   refs:      13,314,784,547
"""

#: A stand-in for valgrind: runs the command after the two callgrind options and reports a
#: count that depends on whether the child was told to stop before the replay.
_FAKE_VALGRIND = """import os, subprocess, sys
assert sys.argv[1:3] == ["--tool=callgrind", "--callgrind-out-file=/dev/null"], sys.argv
if os.environ.get("PYTHONHASHSEED") != "0":
    sys.stderr.write("hash seed not fixed\\n")
    sys.exit(3)
rc = subprocess.call(sys.argv[3:])
n = 1200 if os.environ.get("SERVESIM_BENCH_NO_REPLAY") == "1" else 5000
sys.stderr.write(f"==7== Collected : {n}\\n")
sys.exit(rc)
"""


def _fake(tmp_path: Path) -> str:
    path = tmp_path / "valgrind"
    path.write_text(f"#!{sys.executable}\n{_FAKE_VALGRIND}")
    path.chmod(0o755)
    return str(path)


def test_the_count_is_read_from_the_summary():
    pi = _bench_module("perf_instructions")
    assert pi.collected(_SUMMARY) == 13_314_784_547
    assert pi.collected(_SUMMARY + "==31338== Collected : 12\n") == 12  # the last summary
    with pytest.raises(pi.CountError, match="no instruction count"):
        pi.collected("==1== Events    : Ir\n")


def test_a_replay_count_subtracts_the_child_stopped_before_the_replay(tmp_path, monkeypatch):
    pi = _bench_module("perf_instructions")
    fake = _fake(tmp_path)  # written once: two threads run it at a time
    monkeypatch.setattr(pi, "valgrind", lambda: fake)
    env = {**os.environ, "PYTHONHASHSEED": "7", pi.NO_REPLAY: "1"}  # both are overridden
    assert pi.replay_count([sys.executable, "-c", "pass"], env) == 5000 - 1200
    with pytest.raises(pi.CountError, match="^boom$"):
        pi.replay_count([sys.executable, "-c", "import sys; sys.exit('boom')"], env)
    monkeypatch.setattr(pi, "valgrind", lambda: None)
    with pytest.raises(pi.CountError, match="not on PATH"):
        pi.count([sys.executable, "-c", "pass"], dict(os.environ))


def test_perf_child_stops_before_the_replay_when_told(tmp_path):
    trace = tmp_path / "t.jsonl"
    trace.write_text("".join(json.dumps({"timestamp": 10 * i, "input_length": 100, "output_length": 5,
                                         "hash_ids": [i]}) + "\n" for i in range(4)))
    env = {**os.environ, "PYTHONPATH": str(ROOT / "benchmarks")}
    child = [sys.executable, str(ROOT / "benchmarks" / "perf_child.py")]
    stopped = subprocess.run([*child, str(tmp_path / "a.json"), str(trace)], check=False,
                             env={**env, "SERVESIM_BENCH_NO_REPLAY": "1"}, capture_output=True)
    assert stopped.returncode == 0 and not (tmp_path / "a.json").exists()
    full = subprocess.run([*child, str(tmp_path / "b.json"), str(trace)], check=False, env=env,
                          capture_output=True)
    assert full.returncode == 0
    assert json.loads((tmp_path / "b.json").read_text())["report"]["completed"] == 4


def test_the_table_gives_ratios_to_none_and_names_failures():
    bs = _bench_module("bench_sinks")
    counts = {"none": (2_000_000, 51), "jsonl-both": (3_100_000, 51), "zmq-kv": "valgrind: boom"}
    assert bs.count_table(["none", "jsonl-both", "zmq-kv", "prometheus"], counts) == [
        "| sinks | instructions | passes | x none |",
        "|---|---:|---:|---:|",
        "| none | 2,000,000 | 51 | 1.000 |",
        "| jsonl-both | 3,100,000 | 51 | 1.550 |",
        "| zmq-kv | error: valgrind: boom | | |",
        "| prometheus | error: no run | | |",
    ]
    assert bs.count_table(["jsonl-kv"], {"jsonl-kv": (5, 1)})[2] == "| jsonl-kv | 5 | 1 |  |"


def test_unknown_configurations_and_a_missing_valgrind_are_one_line(capsys, monkeypatch):
    bs = _bench_module("bench_sinks")
    with pytest.raises(SystemExit) as exc:
        bs.main(["--sinks", "none,jsonl-bth", "--repeat", "1"])
    assert exc.value.code == 2
    assert "--sinks none,jsonl-bth: each name one of none, memory-kv, jsonl-kv" in capsys.readouterr().err
    monkeypatch.setattr(bs, "valgrind", lambda: None)
    with pytest.raises(SystemExit) as exc:
        bs.main(["--instructions"])
    assert exc.value.code == 2
    assert "--instructions needs valgrind on PATH" in capsys.readouterr().err
