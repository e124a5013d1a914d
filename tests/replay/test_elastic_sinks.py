"""Sinks in an elastic replay are told when a worker is added or removed
(``worker_changed(WorkerChange)``, servesim.sinks.base), through composing sinks too, in order
with the events they receive."""

from __future__ import annotations

import pytest
from elastic_cases import load
from servesim.fast.event_readers import fit_to_readers
from servesim.replay.elastic_setup import build_elastic_replayer
from servesim.replay.runner import load_workload
from servesim.sinks.base import SinkError, WorkerChange
from servesim.sinks.builtin import MemoryFpmSink, MemoryKvEventSink
from servesim.sinks.compose import TeeKvEventSink

ELASTIC = """
planner:
  type: schedule
  steps: [{at_s: 0.5, workers: 4}, {at_s: 2.0, workers: 1}]
lifecycle:
  startup_s: 0.25
  warmup: {duration_s: 0.5, factor: 2.0}
  drain: wait
  retry: {max_attempts: 2, backoff_s: 0.05}
faults: {restart_s: 0.3, crashes: [{at_s: 1.0, worker: 0}]}
"""


class KvRecorder(MemoryKvEventSink):
    """Writes events and changes into one shared list, in the order it is told them."""

    def __init__(self, told: list) -> None:
        super().__init__()
        self.told = told

    def publish(self, worker_id, at_ms, events) -> None:
        super().publish(worker_id, at_ms, events)
        self.told.extend((worker_id, at_ms, type(e.data).__name__) for e in events)

    def worker_changed(self, change: WorkerChange) -> None:
        self.told.append(change)


class FpmRecorder(MemoryFpmSink):
    def __init__(self) -> None:
        super().__init__()
        self.changes: list[WorkerChange] = []

    def worker_changed(self, change: WorkerChange) -> None:
        self.changes.append(change)


def _replay(loaded, kv_sinks, fpm_sinks):
    sim = loaded.sim
    workload = load_workload(sim.workload, loaded.plugins)
    router_class = loaded.plugins.routers().get(sim.cluster.router)
    router = router_class(sim.cluster.workers, sim.engine.dp_size, sim.engine.bs, loaded.router_config)

    def make_factory(overrides=None, path="engine"):
        factory = loaded.engine_factory(overrides, emit_kv_events=True, path=path)
        factory.fit_to_sinks(kv_sinks)
        fit_to_readers(factory, kv_sinks, router_reads_events=router.wants_kv_events,
                       record_metrics=True, router=None)
        return factory

    replayer = build_elastic_replayer(loaded, workload, make_factory, router=router,
                                      block_size=sim.engine.bs, kv_sinks=kv_sinks,
                                      fpm_sinks=fpm_sinks)
    replayer.run()
    return replayer


def test_sinks_are_told_of_added_and_removed_workers(tmp_path) -> None:
    told: list = []
    fpm = FpmRecorder()
    replayer = _replay(load(tmp_path, ELASTIC, n=160, rate=50.0), [TeeKvEventSink([KvRecorder(told)])], [fpm])
    changes = [x for x in told if isinstance(x, WorkerChange)]
    # worker 0 crashes at 1 s and restarts with its id; at 2 s the pool shrinks to one: worker
    # 0 (warming up) and worker 3 (holding nothing, stops at once) go first, then worker 2
    stop0, stop2 = replayer.records[0].stopped_ms, replayer.records[2].stopped_ms
    assert 2000.0 < stop0 < stop2
    assert [(c.worker_id, c.at_ms, c.change, c.pool, c.dp_size) for c in changes] == [
        (2, 500.0, "added", "default", 1), (3, 500.0, "added", "default", 1),
        (3, 2000.0, "removed", "default", 1), (0, stop0, "removed", "default", 1),
        (2, stop2, "removed", "default", 1),
    ]
    assert fpm.changes == changes  # an FPM sink is told the same
    for c in changes:
        at = told.index(c)
        mine = [x for x in told[:at] if not isinstance(x, WorkerChange) and x[0] == c.worker_id]
        if c.change == "added":  # nothing from it before it was added
            assert mine == []
        else:  # its cache is announced gone just before, and nothing comes from it after
            assert told[at - 1] == (c.worker_id, c.at_ms, "ClearedBlocks")
            assert not any(x[0] == c.worker_id for x in told[at + 1:] if not isinstance(x, WorkerChange))
    # the crash clears worker 0's cache and tells no change
    assert (0, 1000.0, "ClearedBlocks") in told
    assert replayer.records[0].history == [(0.0, "ready"), (1000.0, "restarting"), (1300.0, "starting"),
                                           (1550.0, "warmup"), (2000.0, "draining"), (stop0, "stopped")]


class Broken(MemoryKvEventSink):
    def worker_changed(self, change: WorkerChange) -> None:
        raise OSError("socket closed")


def test_a_failing_sink_is_named(tmp_path) -> None:
    with pytest.raises(SinkError, match=r"^sink Broken failed at 500.0 ms: socket closed$"):
        _replay(load(tmp_path, ELASTIC, n=160, rate=50.0), [Broken()], [])
