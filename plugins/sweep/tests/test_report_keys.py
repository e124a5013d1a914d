"""The numeric report keys known before a run (servesim.report.keys) are exactly the
numeric keys a run of that configuration reports, for every optional report section; a sweep
objective outside them fails before any point runs, listing the valid keys."""

from __future__ import annotations

from pathlib import Path

import pytest
from servesim.cli.main import main
from servesim.config.loader import load_config
from servesim.replay.runner import simulate
from servesim.report.keys import numeric_keys, report_keys

SMALL = ["workload.synthetic.num_requests=12", "workload.synthetic.output_length=fixed:6"]
HOST = ("engine.kv_bytes_per_token=2",
        "engine.native_host_offload={num_host_blocks: 64}")

CASES = {
    "aggregated": [],
    "sla and percentiles": ["report.sla_ttft_ms=500", "report.sla_tpot_ms=50",
                            "report.percentiles=[50, 99.9]"],
    "prefill/decode split": ["cluster.prefill_workers=1", "cluster.decode_workers=1"],
    "speculative": ["engine.aic_nextn=2"],
    "speculative decode role": ["cluster.prefill_workers=1", "cluster.decode_workers=1",
                                "cluster.decode_engine={aic_nextn: 2}"],
    "host tier": list(HOST),
    "pools": ["cluster.pools=[{name: a, workers: 1}, {name: b, workers: 1, "
              "engine: {aic_nextn: 1}}]"],
}


@pytest.mark.parametrize("sets", CASES.values(), ids=CASES.keys())
def test_known_keys_are_the_reported_numeric_keys(sets: list[str]) -> None:
    loaded = load_config(None, [*SMALL, *sets])
    report = simulate(loaded).report
    report.pop("config")
    assert report_keys(loaded) == set(numeric_keys(report))


def _sweep(tmp_path: Path, objectives: str) -> list[str]:
    path = tmp_path / "sw.yaml"
    path.write_text("base: {workload: {synthetic: {num_requests: 3}}}\n"
                    "points: [{cluster.workers: 2}, "
                    "{cluster.prefill_workers: 1, cluster.decode_workers: 1}]\n"
                    + objectives)
    return ["sweep", str(path), "--out", str(tmp_path / "out"), "--parallel", "1"]


def _error(argv: list[str], capsys: pytest.CaptureFixture[str]) -> str:
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith("servesim: error: "), err
    return err[len("servesim: error: "):-1]


def test_unknown_objective_keys_fail_before_any_point_runs(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("SERVESIM_DISABLE_PLUGINS", "toy")  # no plugin adds report keys
    argv = _sweep(tmp_path, "objectives: {maximize: output_throughput_per_gpx}\n")
    message = _error(argv, capsys)
    prefix = (f"{argv[1]}: objectives.maximize: no point reports a numeric "
              "'output_throughput_per_gpx' (did you mean 'output_throughput_per_gpu'?); "
              "expected one of: ")
    assert message.startswith(prefix)
    listed = message[len(prefix):].split(", ")
    # one point is aggregated, one a prefill/decode split: the union of both reports
    split = load_config(None, ["cluster.prefill_workers=1", "cluster.decode_workers=1"])
    expected = {*report_keys(split), "gpus"}
    expected |= {f"{k}_per_gpu" for k in expected if k.endswith("throughput")}
    assert listed == sorted(expected)
    assert {"worker_utilization.decode", "output_throughput_per_gpu", "p99_ttft_ms"} <= set(listed)
    assert not list((tmp_path / "out" / "points").iterdir())  # nothing ran
    argv = _sweep(tmp_path, "objectives: {minimize: p99_ttft_ms, subject_to: ['gpus == 2', "
                            "'p99_itl <= 5']}\n")
    assert _error(argv, capsys).startswith(
        f"{argv[1]}: objectives.subject_to[1]: no point reports a numeric 'p99_itl' "
        "(did you mean 'p99_itl_ms'?); expected one of: completed, ")
    argv = _sweep(tmp_path, "pareto: {x: nope, y: p99_ttft_ms}\n")
    assert _error(argv, capsys).startswith(
        f"{argv[1]}: pareto.x: no point reports a numeric 'nope'; expected one of: completed, ")
    assert not list((tmp_path / "out" / "points").iterdir())
