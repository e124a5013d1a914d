"""Composing sinks (tee, filter, sample), nested spec errors, and several sinks of a kind."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from fake_plugins import fail
from servesim.config.loader import load_config
from servesim.contract import ClearedBlocks, ForwardPassMetrics, KvBlock, KvEvent, RemovedBlocks, StoredBlocks
from servesim.errors import ConfigError
from servesim.replay.runner import simulate
from servesim.sinks.build import build_sinks

SMALL = ["workload.synthetic.num_requests=30", "engine.num_gpu_blocks=80"]


def _built(sets: list[str]) -> dict[str, list]:
    return build_sinks(load_config(None, [*SMALL, *sets]))


def _events() -> list[tuple[int, float, list[KvEvent]]]:
    stored = KvEvent(0, 0, StoredBlocks(None, (KvBlock(1, 1),)))
    removed = KvEvent(1, 1, RemovedBlocks((1,)))
    cleared = KvEvent(2, 0, ClearedBlocks())
    return [(0, 1.0, [stored, removed]), (1, 2.0, [stored]), (0, 5.0, [cleared, removed]), (2, 9.0, [stored])]


def _feed(sink, stream) -> None:
    for w, t, payload in stream:
        sink.publish(w, t, payload)


def test_tee_gives_every_sink_everything_and_closes_each_once() -> None:
    (tee,) = _built(["sinks.kv_events=[{type: tee, sinks: [{type: memory}, {type: memory}]}]"])["kv_events"]
    _feed(tee, _events())
    a, b = tee.sinks
    expected = [(w, t, e) for w, t, batch in _events() for e in batch]
    assert a.events == expected and b.events == expected
    tee.close()
    assert a.closed and b.closed


def test_filter_by_worker_dp_rank_type_and_window() -> None:
    spec = (
        "sinks.kv_events=[{type: filter, workers: [0, 1], dp_ranks: [0], event_types: [BlockStored, "
        "AllBlocksCleared], start_ms: 1.5, end_ms: 9.0, sinks: [{type: memory}]}]"
    )
    (flt,) = _built([spec])["kv_events"]
    _feed(flt, _events())
    (mem,) = flt.sinks
    # t=1.0 is before the window, worker 2 is excluded, the dp-rank-1 removals are dropped
    assert [(w, t, e.event_id) for w, t, e in mem.events] == [(1, 2.0, 0), (0, 5.0, 2)]


def test_filter_takes_the_class_names_a_sink_sees_too() -> None:
    """``event_types`` names the wire types or the ``KvEvent.data`` classes, mixed at will."""
    kept = []
    for types in ("[BlockStored, AllBlocksCleared]", "[StoredBlocks, ClearedBlocks]",
                  "[StoredBlocks, AllBlocksCleared]"):
        spec = (f"sinks.kv_events=[{{type: filter, workers: [0, 1], dp_ranks: [0], event_types: {types}, "
                "start_ms: 1.5, end_ms: 9.0, sinks: [{type: memory}]}]")
        (flt,) = _built([spec])["kv_events"]
        _feed(flt, _events())
        kept.append([(w, t, e.event_id) for w, t, e in flt.sinks[0].events])
    assert kept == [[(1, 2.0, 0), (0, 5.0, 2)]] * 3


def test_filter_fpm_by_dp_rank_and_window() -> None:
    spec = "sinks.fpm=[{type: filter, dp_ranks: [1], end_ms: 3.0, sinks: [{type: memory}]}]"
    (flt,) = _built([spec])["fpm"]
    for i, (d, t) in enumerate([(0, 1.0), (1, 1.0), (1, 2.5), (1, 3.0)]):
        flt.publish(0, t, ForwardPassMetrics(dp_rank=d, counter_id=i))
    assert [m.counter_id for _, _, m in flt.sinks[0].metrics] == [1, 2]


def test_sample_keeps_every_nth_from_a_seeded_offset() -> None:
    def kept(seed: int) -> list[int]:
        (smp,) = _built(
            [f"sinks.kv_events=[{{type: sample, every: 3, seed: {seed}, sinks: [{{type: memory}}]}}]"]
        )["kv_events"]
        for i in range(10):
            smp.publish(
                0, float(i), [KvEvent(2 * i, 0, ClearedBlocks()), KvEvent(2 * i + 1, 0, ClearedBlocks())]
            )
        return [e.event_id for _, _, e in smp.sinks[0].events]

    import random

    for seed in (0, 1, 5):
        offset = random.Random(seed).randrange(3)
        assert kept(seed) == list(range(offset, 20, 3))
        assert kept(seed) == kept(seed)


def test_nested_composition_in_a_run_writes_what_a_plain_sink_writes(tmp_path: Path) -> None:
    plain, a, b = (tmp_path / n for n in ("plain.jsonl", "a.jsonl", "b.jsonl"))
    simulate(load_config(None, [*SMALL, f"sinks.kv_events=[{{type: jsonl, path: {plain}}}]"]))
    nested = (
        f"sinks.kv_events=[{{type: tee, sinks: [{{type: jsonl, path: {a}}}, {{type: filter, "
        f"event_types: [BlockRemoved], sinks: [{{type: jsonl, path: {b}}}]}}]}}, "
        f"{{type: memory}}]"
    )
    simulate(load_config(None, [*SMALL, nested]))
    assert a.read_text() == plain.read_text() and plain.stat().st_size > 0
    removed = [line for line in plain.read_text().splitlines() if json.loads(line)["type"] == "BlockRemoved"]
    assert b.read_text().splitlines() == removed and removed


def test_bad_nested_key_names_its_path(capsys: pytest.CaptureFixture[str]) -> None:
    spec = (
        "sinks.kv_events=[{type: tee, sinks: [{type: memory}, {type: filter, "
        "sinks: [{type: jsonl, path: x, colour: red}]}]}]"
    )
    assert fail(["run", "--set", spec], capsys) == (
        f"--set {spec}: sinks.kv_events[0].sinks[1].sinks[0].colour: unknown key; expected one of: path, token_ids"
    )
    assert fail(["run", "--set", "sinks.fpm=[{type: tee, sinks: [{type: nope}]}]"], capsys).startswith(
        "--set sinks.fpm=[{type: tee, sinks: [{type: nope}]}]: "
        "sinks.fpm[0].sinks[0].type: unknown fpm_sink 'nope'"
    )
    assert fail(
        ["run", "--set", "sinks.kv_events=[{type: filter, event_types: [Stored], sinks: [{type: memory}]}]"],
        capsys,
    ).endswith(
        "sinks.kv_events[0].event_types[0]: unknown event type 'Stored'; expected one of "
        "BlockStored, BlockRemoved, AllBlocksCleared (or the class names StoredBlocks, RemovedBlocks, "
        "ClearedBlocks)"
    )


def test_composite_needs_sinks_and_sample_needs_every() -> None:
    with pytest.raises(
        ConfigError, match=r"sinks.kv_events\[0\].sinks: sinks must list at least one sink spec"
    ):
        load_config(None, ["sinks.kv_events=[{type: tee, sinks: []}]"])
    with pytest.raises(ConfigError) as info:
        load_config(None, ["sinks.fpm=[{type: sample, every: 0, sinks: [{type: memory}]}]"])
    assert str(info.value) == (
        "--set sinks.fpm=[{type: sample, every: 0, sinks: [{type: memory}]}]: "
        "sinks.fpm[0].every: every must be an integer >= 1, got 0"
    )


@pytest.mark.parametrize("seed", [-1, -7])
def test_sample_seed_must_not_be_negative(
    seed: int, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """random.Random(-1) draws what random.Random(1) draws: a negative seed would silently
    repeat its positive twin's sample, so it is refused, nested too, by run and validate."""
    spec = ("sinks.kv_events=[{type: tee, sinks: [{type: sample, every: 2, "
            f"seed: {seed}, sinks: [{{type: memory}}]}}]}}]")
    message = f"sinks.kv_events[0].sinks[0].seed: seed must be an integer >= 0, got {seed}"
    assert fail(["run", "--set", spec], capsys) == f"--set {spec}: {message}"
    config = tmp_path / "sim.yaml"
    config.write_text("sinks:\n  kv_events:\n    - {type: tee, sinks: [{type: sample, every: 2, "
                      f"seed: {seed}, sinks: [{{type: memory}}]}}]}}\n")
    assert fail(["validate", str(config)], capsys) == f"{config}: {message}"


def test_trace_shorthand(tmp_path: Path) -> None:
    trace = tmp_path / "t.jsonl"
    trace.write_text('{"timestamp": 0, "input_length": 20, "output_length": 2, "hash_ids": [1]}\n')
    short = tmp_path / "short.yaml"
    short.write_text(f"workload:\n  trace: {trace}\n")
    loaded = load_config(str(short))
    assert loaded.sim.workload.trace.path == str(trace)
    assert loaded.sim.workload.trace.format == "mooncake"
    assert (
        load_config(str(short), ["workload.trace.trace_block_size=16"]).sim.workload.trace.trace_block_size
        == 16
    )
    assert load_config(None, [f"workload.trace={trace}"]).sim.workload.trace.path == str(trace)
    assert simulate(loaded).report["completed"] == 1


def test_composing_sinks_pass_on_bind_token_ids_and_the_finished_log(tmp_path: Path) -> None:
    """A jsonl sink asking for token ids inside a tee inside a sample still gets them, and
    every wrapped sink is bound to the deployment and handed the finished log."""
    from servesim.sinks.base import SinkDeployment

    nested = (
        "sinks.kv_events=[{type: sample, every: 1, sinks: [{type: tee, sinks: ["
        f"{{type: jsonl, path: '{tmp_path / 'kv.jsonl'}', token_ids: true}}, {{type: memory}}]}}]}}]"
    )
    (sample,) = _built([nested])["kv_events"]
    (tee,) = sample.sinks
    assert sample.wants_token_ids and tee.wants_token_ids
    seen: list[object] = []
    memory = tee.sinks[1]
    memory.bind = seen.append  # type: ignore[attr-defined]
    memory.replay_done = seen.append  # type: ignore[attr-defined]
    deployment = SinkDeployment(num_workers=1, dp_size=1, block_size=16, backend="vllm")
    sample.bind(deployment)
    sample.replay_done("the log")
    assert seen == [deployment, "the log"]
    sample.close()
    loaded = load_config(None, [*SMALL, nested])
    block = loaded.sim.engine.bs
    result = simulate(loaded)
    lines = [json.loads(line) for line in (tmp_path / "kv.jsonl").read_text().splitlines()]
    stored = [rec for rec in lines if rec["type"] == "BlockStored"]
    assert stored and all(len(rec["token_ids"]) == block * len(rec["block_hashes"]) for rec in stored)
    assert result.report["completed"] == 30
