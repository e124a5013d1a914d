"""The reference's agentic Mooncake v2 rows (servesim_agentic.agentic_v2): typed edges,
``not_before_ms`` and the graph rules the reference enforces, with errors naming the file,
line and field."""

from __future__ import annotations

import json

import pytest
from servesim.config.loader import load_config
from servesim.errors import TraceError
from servesim.plugins import Plugins
from servesim.replay.runner import simulate
from servesim.report.summary import per_request_lines
from servesim_agentic.agentic_mooncake import AgenticMooncakeTrace

HEADER = {"schema": "dynamo.agentic_mooncake", "version": 2, "block_size": 16,
          "hash_id_scope": "local", "source": {"format": "test", "digest": "d"}}


def row(rid, nb=0.0, deps=(), hashes=(1, 2, 3), inp=48, out=10, session="s", play="p"):
    return {"request_id": rid, "play_id": play, "session_id": session, "model": "m",
            "input_length": inp, "output_length": out, "hash_ids": list(hashes),
            "not_before_ms": nb, "dependencies": list(deps)}


def dep(rid, trigger="completion", delay=0.0, relation="sequence"):
    return {"request_id": rid, "trigger": trigger, "delay_ms": delay, "relation": relation}


def write(tmp_path, rows, header=HEADER):
    path = tmp_path / "t.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in [header, *rows]))
    return path


# Checked against the reference (Dynamo 1.6.1) on this file: a not_before floor (b), a
# dispatch-triggered spawn (c) and a root that is not rebased (e at 250 ms).
ROWS = [row("a", 100.0),
        row("b", 0.0, [dep("a", delay=10.0)], (1, 2, 3, 4), 64, 5),
        row("c", 0.0, [dep("a", "dispatch", 30.0, "spawn")], (7,), 16, 5, "s2"),
        row("e", 250.0, (), (8,), 16, 3, "s3", "q")]


@pytest.mark.parametrize(("speedup", "want"), [
    (1, {"a": (100.0, 187.49213), "b": (197.49213, 238.092731), "c": (130.0, 181.560046),
         "e": (250.0, 278.342549)}),
    (2, {"a": (50.0, 154.2938), "b": (159.2938, 200.69513), "c": (65.0, 113.784025),
         "e": (125.0, 160.094529)}),
])
def test_release_times_match_the_reference(tmp_path, speedup, want):
    path = write(tmp_path, ROWS)
    cfg = tmp_path / "c.yaml"
    cfg.write_text(f"engine: {{block_size: 16, num_gpu_blocks: 1000}}\n"
                   f"workload:\n  trace: {{path: {path}, format: agentic_mooncake}}\n")
    res = simulate(load_config(str(cfg), [f"workload.arrival_speedup_ratio={speedup}"], Plugins()))
    out = {r["request_id"]: r for r in map(json.loads, per_request_lines(res.log, res.session_ids))}
    ids = "abce"  # request ids follow the rows sorted by request_id
    assert {ids[i]: (r["arrival_ms"], r["completion_ms"]) for i, r in out.items()} == want
    assert out[1]["cached_tokens"] == 48


def test_rows_are_numbered_in_request_id_order(tmp_path):
    w = AgenticMooncakeTrace.read(str(write(tmp_path, [row("r2"), row("r10"), row("r1")])))
    assert [s.session_id for s in w.sessions] == ["s", "s", "s"]
    assert [t.line for s in w.sessions for t in s.turns] == [4, 3, 2]  # r1, r10, r2


@pytest.mark.parametrize(("rows", "line", "field"), [
    ([row("a"), row("b", deps=[dep("a", "dispatch", relation="join")])], 3, "dependencies[0].trigger"),
    ([row("a"), row("b", deps=[dep("a", relation="fork")])], 3, "dependencies[0].relation"),
    ([row("a"), row("b", deps=[dep("zz")])], 3, "dependencies"),
    ([row("a", play="p1"), row("b", deps=[dep("a")], play="p2")], 3, "dependencies"),
    ([row("a"), row("a")], 3, "request_id"),
    ([row("a", inp=49)], 2, "input_length"),
    ([dict(row("a"), output_tokens=10)], 2, "output_tokens"),  # one field, two names
    ([dict(row("a"), input_tokens=48)], 2, "input_tokens"),
    ([row("a", nb=-1.0)], 2, "not_before_ms"),
    ([{k: v for k, v in row("a").items() if k != "play_id"}], 2, "play_id"),
    ([{k: v for k, v in row("a").items() if k != "not_before_ms"}], 2, "not_before_ms"),
    ([row("a", deps=[dep("b")]), row("b", deps=[dep("a")])], 2, "dependencies"),
])
def test_a_bad_row_names_file_line_and_field(tmp_path, rows, line, field):
    path = write(tmp_path, rows)
    with pytest.raises(TraceError) as info:
        AgenticMooncakeTrace.read(str(path))
    assert str(info.value).startswith(f"{path}:{line}:") and f"'{field}'" in str(info.value)


def test_a_bad_header_is_refused(tmp_path):  # snapshots of v2 rows: test_snapshot.py
    with pytest.raises(TraceError) as info:
        AgenticMooncakeTrace.read(str(write(tmp_path, [row("a")], dict(HEADER, version=3))))
    assert info.value.line == 1 and "'version'" in str(info.value)
