"""Every example of docs/writing-a-plugin.md runs: the installed servesim-toy plugins end to
end, the page's combined config, its check-kit snippet, and the toy-trace command."""

from __future__ import annotations

import json
import os
import re
from pathlib import Path

import pytest
from servesim.cli.main import main
from servesim.config.loader import load_config
from servesim.replay.runner import simulate

ROOT = Path(__file__).resolve().parents[2]
PAGE = (ROOT / "docs" / "writing-a-plugin.md").read_text()
BLOCKS = [(m.group(1), m.group(2)) for m in re.finditer(r"^```(\w*)\n(.*?)^```$", PAGE, re.M | re.S)]


def test_toy_trace_command_and_csv_format(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    trace = tmp_path / "trace.csv"
    assert main(["toy-trace", str(trace), "--requests", "6", "--gap-ms", "10"]) == 0
    assert capsys.readouterr().out == f"wrote 6 requests to {trace}\n"
    lines = trace.read_text().splitlines()
    assert lines[:3] == ["timestamp_ms,input_length,output_length", "0,64,4", "10,80,5"]
    assert main(["toy-trace", str(trace), "--requests", "0"]) == 2
    assert capsys.readouterr().err == "servesim: error: --requests must be >= 1, got 0\n"
    trace.write_text("timestamp_ms,input_length,output_length\n0,64,4\n5,x,1\n")
    assert main(["run", "--trace", str(trace), "--set", "workload.trace.format=toy_csv"]) == 2
    assert capsys.readouterr().err == (
        f"servesim: error: {trace}:3: expected timestamp_ms,input_length,output_length, got '5,x,1'\n"
    )


def test_every_example_together(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    combined = [body for lang, body in BLOCKS if lang == "yaml"][1]
    monkeypatch.chdir(tmp_path)
    assert main(["toy-trace", "trace.csv", "--requests", "30", "--gap-ms", "0.5"]) == 0
    Path("sim.yaml").write_text(combined)
    assert main(["validate", "sim.yaml"]) == 0
    assert not os.path.exists("out")  # validation builds the sinks but creates no file
    assert main(["run", "sim.yaml", "--json"]) == 0
    out = capsys.readouterr().out
    report = json.loads(out[out.index("{") :])
    assert report["completed"] == 30 and "toy_passes_per_worker" not in report  # not a toy run
    counts = json.loads(Path("out/counts.json").read_text())
    events = [json.loads(line) for line in Path("out/kv.jsonl").read_text().splitlines()]
    assert counts["StoredBlocks"] == sum(e["type"] == "BlockStored" for e in events) > 0
    # arrivals every 0.5 ms overlap: the least-loaded slot is not always worker 0
    assert sorted({e["worker"] for e in events}) == [0, 1]


def test_toy_observer_watches_toy_runs_only() -> None:
    sets = ["engine.backend=toy", "workload.synthetic.num_requests=12", "cluster.workers=2"]
    result = simulate(load_config(None, sets))
    per_worker = result.report["toy_passes_per_worker"]
    assert len(per_worker) == 2 and sum(per_worker) == result.passes
    assert (
        "toy_passes_per_worker"
        not in simulate(load_config(None, ["workload.synthetic.num_requests=5"])).report
    )


def test_roofline_prices_from_geometry_on_every_backend() -> None:
    base = [
        "engine.timing_model.type=toy_roofline",
        "workload.synthetic.num_requests=20",
        "engine.num_layers=32",
        "engine.num_kv_heads=8",
        "engine.head_dim=128",
    ]
    for backend in ("toy", "vllm", "sglang", "trtllm"):
        fast = simulate(load_config(None, [*base, f"engine.backend={backend}"])).report
        slow = simulate(
            load_config(None, [*base, f"engine.backend={backend}", "engine.timing_model.bandwidth_gb_s=30"])
        ).report
        assert fast["completed"] == slow["completed"] == 20
        assert slow["mean_tpot_ms"] > fast["mean_tpot_ms"] > 0.5  # overhead_ms is the floor


def test_page_kit_snippet_runs(tmp_path: Path) -> None:
    (snippet,) = [
        body for lang, body in BLOCKS if lang == "python" and "def test_toy_examples_pass_their_kits" in body
    ]
    namespace: dict[str, object] = {}
    exec(compile(snippet, "writing-a-plugin.md", "exec"), namespace)  # noqa: S102
    namespace["test_toy_examples_pass_their_kits"](tmp_path)  # type: ignore[operator]


def test_page_validation_error_is_what_validate_prints(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    (shown,) = [body for lang, body in BLOCKS if lang == "text" and "toy_roofline" in body]
    monkeypatch.chdir(tmp_path)
    Path("sim.yaml").write_text("engine:\n  timing_model: {type: toy_roofline, bandwidth_gb_s: 0}\n")
    assert main(["validate", "sim.yaml"]) == 2
    assert capsys.readouterr().err == shown
