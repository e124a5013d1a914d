"""Observer hooks: passes and finished requests seen in order, report keys added, failures
and key clashes named; a run with observers reports what a run without them does."""

from __future__ import annotations

from typing import Any

import pytest
from fake_plugins import VERSION, fail, install
from servesim.cli.main import main
from servesim.config.loader import load_config
from servesim.plugins import Plugins
from servesim.replay.runner import simulate

SETS = ["workload.synthetic.num_requests=40", "engine.num_gpu_blocks=120", "cluster.workers=2"]

OBSERVER = """
from servesim import hookimpl

seen = {"passes": [], "finished": [], "starts": 0}


@hookimpl
def servesim_run_started(config):
    seen["passes"].clear()
    seen["finished"].clear()
    seen["starts"] += 1


@hookimpl
def servesim_pass_completed(worker_id, dp_rank, start_ms, end_ms, effects):
    seen["passes"].append((worker_id, dp_rank, start_ms, end_ms, len(effects.outputs.token_request_ids)))


@hookimpl
def servesim_request_finished(request):
    seen["finished"].append(request)


@hookimpl
def servesim_report_extra(report, config):
    return {"observer_passes": len(seen["passes"]), "observer_workers": config.sim.cluster.workers}
"""


def _report(plugins: Plugins | None = None, sets: list[str] = SETS) -> tuple[dict[str, Any], Any]:
    result = simulate(load_config(None, sets, plugins), record_token_times=True)
    return result.report, result


def test_observers_see_every_pass_and_request(monkeypatch: pytest.MonkeyPatch) -> None:
    plain, plain_result = _report(Plugins())
    mod = install(monkeypatch, "watcher", OBSERVER, dist="watcher-dist")
    report, result = _report()
    seen = mod.seen
    assert seen["starts"] == 1
    extra = {k: report.pop(k) for k in ("observer_passes", "observer_workers")}
    assert report == plain  # observers make the driver step; the report is the same
    assert extra == {"observer_passes": len(seen["passes"]), "observer_workers": 2}
    assert len(seen["passes"]) == result.passes
    ends = [p[3] for p in seen["passes"]]
    assert ends == sorted(ends) and all(p[2] <= p[3] for p in seen["passes"])
    assert sum(p[4] for p in seen["passes"]) == report["total_output_tokens"]
    finished = seen["finished"]
    assert sorted(r.request_id for r in finished) == list(range(40))
    log = result.log
    for r in finished:
        rid = r.request_id
        assert (r.worker_id, r.arrival_ms, r.first_token_ms, r.finished_ms, r.output_tokens) == (
            log.worker[rid],
            log.arrival[rid],
            log.first[rid],
            log.done[rid],
            log.ntok[rid],
        )
        assert r.input_tokens == log.input_length[rid] and not r.rejected
    assert [r.finished_ms for r in finished] == sorted(r.finished_ms for r in finished)
    _report()
    assert seen["starts"] == 2 and len(seen["finished"]) == 40  # per-run state reset


def test_observers_in_a_prefill_decode_split(monkeypatch: pytest.MonkeyPatch) -> None:
    sets = ["workload.synthetic.num_requests=12", "cluster.prefill_workers=1", "cluster.decode_workers=1"]
    plain, _ = _report(Plugins(), sets)
    mod = install(monkeypatch, "watcher2", OBSERVER, dist="watcher-dist")
    report, result = _report(None, sets)
    assert report.pop("observer_passes") == result.passes == len(mod.seen["passes"])
    report.pop("observer_workers")
    assert report == plain
    assert {p[0] for p in mod.seen["passes"]} == {0, 1}
    assert len(mod.seen["finished"]) == 12


def test_report_key_clash_and_observer_failure_are_named(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    install(
        monkeypatch,
        "clash",
        """
from servesim import hookimpl

@hookimpl
def servesim_report_extra(report):
    return {"completed": 0}
""",
        dist="clash-dist",
    )
    assert fail(["run", "--set", "workload.synthetic.num_requests=3"], capsys) == (
        f"plugin clash from clash-dist {VERSION}: report key 'completed' is already set by the report itself"
    )
    monkeypatch.undo()
    install(
        monkeypatch,
        "crash",
        """
from servesim import hookimpl

@hookimpl
def servesim_request_finished(request):
    raise LookupError(f"no bucket for request {request.request_id}")
""",
        dist="crash-dist",
    )
    assert fail(["run", "--set", "workload.synthetic.num_requests=3"], capsys) == (
        f"plugin crash from crash-dist {VERSION} failed in servesim_request_finished: "
        "LookupError: no bucket for request 0"
    )


def test_report_extra_appears_in_json(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    import json

    install(
        monkeypatch,
        "extra_only",
        """
from servesim import hookimpl

@hookimpl
def servesim_report_extra(report, config):
    return {"cost_usd": round(report["duration"] * 0.001, 6)}
""",
        dist="extra-dist",
    )
    assert main(["run", "--set", "workload.synthetic.num_requests=3", "--json"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert report["cost_usd"] == round(report["duration"] * 0.001, 6)


def test_no_observer_no_calls() -> None:
    from servesim.replay.observers import Observers

    assert Observers.of(Plugins(autoload=False)) is None


def test_an_observer_can_sit_a_run_out(monkeypatch: pytest.MonkeyPatch) -> None:
    from servesim.replay.observers import Observers

    mod = install(
        monkeypatch,
        "picky_watcher",
        """
from servesim import hookimpl

passes = []


@hookimpl
def servesim_run_started(config):
    return config.sim.cluster.workers > 1


@hookimpl
def servesim_pass_completed(worker_id, end_ms):
    passes.append((worker_id, end_ms))
""",
        dist="picky-dist",
    )
    one = load_config(None, ["workload.synthetic.num_requests=10"])
    assert Observers.of(one.plugins).run_started(one) is None  # nobody watches: runs stay on
    simulate(one)
    assert mod.passes == []
    result = simulate(load_config(None, ["workload.synthetic.num_requests=10", "cluster.workers=2"]))
    assert len(mod.passes) == result.passes and {w for w, _ in mod.passes} == {0, 1}
