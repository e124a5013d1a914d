"""Faults in aggregated replay: crashes and restarts, slow workers, the router's KV view;
invariants under random fault schedules, and determinism."""

from __future__ import annotations

import json

import pytest
from elastic_cases import accounting, load, planned_outputs, run
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from servesim.fast.event_readers import fit_to_readers
from servesim.replay.elastic_setup import build_elastic_replayer
from servesim.replay.runner import load_workload
from servesim.sinks.builtin import MemoryKvEventSink
from servesim.testing.trace import kv_event_problems

CRASH = """
lifecycle: {startup_s: 0.25, retry: {max_attempts: %d, backoff_s: 0.05}}
faults: {restart_s: 0.5, crashes: [{at_s: 1.0, worker: 1}, {at_s: 1.1, worker: 1}, {at_s: 1.2, worker: 7},
                                    {at_s: 900, worker: 0}]}
"""


def _kv_lines(path):
    return [json.loads(x) for x in path.read_text().splitlines()]


def test_a_crash_loses_requests_and_cache_and_restarts(tmp_path):
    sink = tmp_path / "kv.jsonl"
    extra = (CRASH % 0) + f"sinks:\n  kv_events: [{{type: jsonl, path: {sink}}}]\n"
    result = run(tmp_path, extra, n=160, rate=80.0)
    el = result.report["elastic"]
    # the second crash falls while worker 1 restarts; worker 7 does not exist; the last
    # falls after every request ended and is not counted
    assert el["faults"]["crashes"] == 1 and el["faults"]["crashes_missed"] == 2
    assert el["faults"]["restarts"] == 1
    lost = el["faults"]["requests_lost"]
    sub, done, failed, rejected = accounting(result.report)
    assert lost > 0 and failed == lost and sub == done + failed + rejected == 160
    w1 = el["workers"][1]
    assert (w1["crashes"], w1["state"], w1["ready_ms"]) == (1, "ready", 1750.0)
    log = result.log
    assert not any(log.worker[rid] == 1 and 1000.0 <= log.arrival[rid] < 1750.0
                   and not log.rejected[rid] for rid in range(log.n))  # none routed while down
    mine = [x for x in _kv_lines(sink) if x["worker"] == 1]
    cut = next(i for i, x in enumerate(mine) if x["type"] == "AllBlocksCleared")
    assert mine[cut]["at_ms"] == 1000.0 and mine[cut]["event_id"] == mine[cut - 1]["event_id"] + 1
    after = mine[cut + 1:]
    assert after and after[0]["event_id"] == 0 and after[0]["at_ms"] >= 1750.0  # a fresh engine
    assert el["gpu_seconds"] == pytest.approx(2 * max(log.done) / 1000.0, abs=1e-5)  # GPUs held


def test_a_crash_with_retries_loses_no_request(tmp_path):
    result = run(tmp_path, CRASH % 3, n=160, rate=80.0)
    req = result.report["elastic"]["requests"]
    assert req["failed"] == 0 and req["retried"] == result.report["elastic"]["faults"]["requests_lost"] > 0
    assert result.log.ntok == planned_outputs(tmp_path, n=160, rate=80.0)


def test_a_slow_window_stretches_that_workers_passes(tmp_path):
    extra = "faults: {slow: [{worker: 0, from_s: 0.5, until_s: 1.5, factor: 3.0}]}\n"
    result = run(tmp_path, extra, n=120, rate=40.0, record_token_times=True)
    log = result.log
    slow, other = set(), set()
    for rid in range(log.n):
        t = log.token_times[rid]
        for a, b in zip(t, t[1:], strict=False):
            if 500.0 <= a and b < 1500.0:
                (slow if log.worker[rid] == 0 else other).add(round(b - a, 9))
    assert 6.0 in slow and slow <= {3 * g for g in (2.0, 8.0, 10.0)}
    assert 2.0 in other and not other & {6.0, 24.0, 30.0}


@pytest.mark.parametrize("view", ["{delay_ms: 400}", "{drop: 1.0}", "{worker: 1, drop: 0.5}"])
def test_the_routers_kv_view_is_delayed_or_thinned(tmp_path, view):
    sink = tmp_path / "kv.jsonl"
    extra = f"faults: {{kv_view: [{view}]}}\nsinks:\n  kv_events: [{{type: jsonl, path: {sink}}}]\n"
    result = run(tmp_path, extra, n=120, rate=40.0)
    faults = result.report["elastic"]["faults"]
    lines = _kv_lines(sink)  # the sinks see every event, on time
    if "delay" in view:
        assert faults["kv_events_delayed"] == len(lines) and faults["kv_events_dropped"] == 0
    elif "worker" not in view:
        assert faults["kv_events_dropped"] == len(lines)
    else:
        ones = sum(1 for x in lines if x["worker"] == 1)
        assert 0 < faults["kv_events_dropped"] < ones
    plain = run(tmp_path, "faults: {}\n", n=120, rate=40.0, name="plain.yaml")
    assert result.log.worker != plain.log.worker  # a different view routes differently


# --------------------------------------------------------------------------- invariants


def _replay(loaded):
    """The elastic replay of ``loaded`` as servesim.replay.runner builds it, with a memory
    KV sink; returns the replayer after its run."""
    sim = loaded.sim
    plugins = loaded.plugins
    workload = load_workload(sim.workload, plugins)
    router_class = plugins.routers().get(sim.cluster.router)
    router = router_class(sim.cluster.workers, sim.engine.dp_size, sim.engine.bs, loaded.router_config)
    sink = MemoryKvEventSink()

    def make_factory(overrides=None, path="engine"):
        factory = loaded.engine_factory(overrides, emit_kv_events=True, path=path)
        factory.fit_to_sinks([sink])
        fit_to_readers(factory, [sink], router_reads_events=router.wants_kv_events,
                       record_metrics=True, router=None)
        return factory

    replayer = build_elastic_replayer(loaded, workload, make_factory, router=router,
                                      block_size=sim.engine.bs, kv_sinks=[sink])
    replayer.run()
    return replayer, sink, workload


schedules = st.fixed_dictionaries({
    "crashes": st.lists(st.tuples(st.floats(0.0, 2.0).map(lambda x: round(x, 3)),
                                  st.integers(0, 4)), max_size=4),
    "mtbf": st.sampled_from(["null", "0.8", "3"]),
    "restart": st.sampled_from([0.0, 0.1, 0.6]),
    "slow": st.lists(st.tuples(st.integers(0, 3), st.floats(0.0, 1.0).map(lambda x: round(x, 3)),
                               st.sampled_from([1.5, 2.0, 4.0])), max_size=2),
    "view": st.sampled_from(["", "{drop: 0.3}", "{delay_ms: 15}", "{worker: 0, drop: 1.0}"]),
    "drain": st.sampled_from(["wait", "redirect", "immediate"]),
    "attempts": st.integers(0, 2),
    "steps": st.lists(st.tuples(st.floats(0.0, 2.0).map(lambda x: round(x, 3)), st.integers(0, 4)),
                      max_size=3),
    "seed": st.integers(0, 5),
})


def _config(s):
    crashes = ", ".join(f"{{at_s: {t}, worker: {w}}}" for t, w in s["crashes"])
    slow = ", ".join(f"{{worker: {w}, from_s: {a}, until_s: {a + 0.5}, factor: {f}}}"
                     for w, a, f in s["slow"])
    steps = ", ".join(f"{{at_s: {t}, workers: {n}}}" for t, n in s["steps"])
    return (
        f"lifecycle: {{startup_s: 0.1, warmup: {{duration_s: 0.2, factor: 1.5}}, drain: {s['drain']},\n"
        f"            retry: {{max_attempts: {s['attempts']}, backoff_s: 0.02}}, min_workers: 1}}\n"
        f"planner: {{type: schedule, interval_s: 0.25, steps: [{steps}]}}\n"
        f"faults: {{seed: {s['seed']}, mtbf_s: {s['mtbf']}, restart_s: {s['restart']},\n"
        f"         crashes: [{crashes}], slow: [{slow}], kv_view: [{s['view']}]}}\n"
    )


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(s=schedules)
def test_invariants_under_random_faults(tmp_path, s):
    loaded = load(tmp_path, _config(s), n=60, rate=60.0, seqs=8)
    r, sink, workload = _replay(loaded)
    log = r.log
    n = log.n
    report = r.elastic_report()
    req = report["requests"]
    # accounting: every request ends once, completed, failed or rejected
    assert req["submitted"] == n == req["completed"] + req["failed"] + req["rejected"]
    assert all(d >= 0.0 for d in log.done)
    planned = [t.output_length for t in workload.turns()]
    for rid in range(n):
        if log.done[rid] >= 0 and not log.rejected[rid]:
            assert log.ntok[rid] == planned[rid]  # no token lost or duplicated
        else:
            assert log.ntok[rid] <= planned[rid]
    # the router's bookkeeping holds nothing at the end
    assert r.ready_router.routed_to == {} and r.held == []
    assert not any(r.state.active_requests) and not r.state.holders
    # each worker incarnation's KV events replay cleanly; none after a worker stopped
    by_worker: dict[int, list] = {}
    for w, at, ev in sink.events:
        by_worker.setdefault(w, []).append((ev.dp_rank, at, ev))
    for w, evs in by_worker.items():
        seg: list = []
        for item in evs:
            seg.append(item)
            if type(item[2].data).__name__ == "ClearedBlocks":
                assert kv_event_problems(seg) == [], w
                seg = []
        assert kv_event_problems(seg) == [], w
        stop = r.records[w].stopped_ms
        if stop >= 0:
            assert evs[-1][1] <= stop
    # workers still serving hold no active block once drained
    for rec in r.records:
        if rec.state.value in ("ready", "warmup"):
            for dp in range(r.engines[rec.worker].dp_size):
                occ = r.view.occupancy.get((rec.worker, dp))
                if occ is not None:
                    assert occ.active_blocks == 0 and occ.running_requests == occ.waiting_requests == 0


@settings(max_examples=6, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(s=schedules)
def test_same_faults_same_bytes(tmp_path, s):
    loaded = load(tmp_path, _config(s), n=60, rate=60.0, seqs=8)
    a, sa, _ = _replay(loaded)
    b, sb, _ = _replay(loaded)
    assert json.dumps(a.elastic_report(), sort_keys=True) == json.dumps(b.elastic_report(), sort_keys=True)
    assert a.log.done == b.log.done and a.log.worker == b.log.worker
    assert repr(sa.events) == repr(sb.events)


def test_random_crashes_follow_the_seed(tmp_path):
    def crashes(seed):
        extra = f"faults: {{seed: {seed}, mtbf_s: 1.0, restart_s: 0.2}}\n"
        result = run(tmp_path, extra, n=120, rate=40.0, name=f"s{seed}.yaml")
        el = result.report["elastic"]
        return el["faults"]["random_crashes"], result.log.done, result.log.worker

    assert crashes(1) == crashes(1)
    assert crashes(1) != crashes(2)
    assert crashes(1)[0] > 0


REJECT = """
faults: {seed: 3, rejections: {rate: 0.25, reasons: {overloaded: 3, context_length: 1}}}
"""


def test_rejections_on_arrival_are_seeded_per_request_and_counted_by_reason(tmp_path):
    result = run(tmp_path, REJECT, n=160, rate=80.0)
    el = result.report["elastic"]
    by_reason = el["faults"]["rejected"]
    sub, done, failed, rejected = accounting(result.report)
    assert sub == done + failed + rejected == 160 and failed == 0
    assert rejected == sum(by_reason.values()) and set(by_reason) == {"context_length", "overloaded"}
    assert by_reason["overloaded"] > by_reason["context_length"] > 0
    log = result.log
    refused = [rid for rid in range(log.n) if log.rejected[rid]]
    assert all(log.worker[rid] < 0 and log.done[rid] == log.arrival[rid] for rid in refused)
    # the draws depend on the seed and the request alone: the same requests, and another
    # seed picks others
    again = run(tmp_path, REJECT, n=160, rate=80.0)
    assert [rid for rid in range(again.log.n) if again.log.rejected[rid]] == refused
    other = run(tmp_path, REJECT.replace("seed: 3", "seed: 4"), n=160, rate=80.0)
    assert [rid for rid in range(other.log.n) if other.log.rejected[rid]] != refused


@pytest.mark.parametrize(("item", "key"), [
    ("rate: 1.5", "faults.rejections.rate"),
    ("reasons: {overloaded: 0}", "faults.rejections.reasons.overloaded"),
    ("reasons: {}", "faults.rejections.reasons"),
])
def test_bad_rejections_name_their_key(tmp_path, item, key):
    from servesim.errors import ConfigError

    with pytest.raises(ConfigError, match=key.replace(".", r"\.")):
        load(tmp_path, f"faults: {{rejections: {{{item}}}}}\n")
