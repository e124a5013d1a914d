"""The ``prometheus`` sink's OpenMetrics file of a replay: simulated timestamps from the
epoch, totals equal to the replay's report, valid OpenMetrics (each scrape parsed by
prometheus-client's parser; the whole file by ``promtool`` when it is installed)."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
from collections import defaultdict
from pathlib import Path

import pytest
from prometheus_client.openmetrics.parser import text_string_to_metric_families
from servesim.config.loader import load_config
from servesim.replay.runner import simulate

LINE = re.compile(r"^(?P<name>[^{ ]+)(?P<labels>\{[^}]*\})? (?P<value>\S+) (?P<ts>\d+\.\d{3})$")
EPOCH = 1767225600.0


def _replay(tmp_path: Path, backend: str = "vllm", name: str = "m.om") -> tuple[dict, str]:
    trace = tmp_path / "t.jsonl"
    trace.write_text("".join(json.dumps({"timestamp": 150 * i, "hash_ids": [i % 4, 50 + i],
                                         "output_length": 20 + i % 7}) + "\n" for i in range(30)))
    out = tmp_path / name
    sets = [f"engine.backend={backend}", "engine.block_size=4", "cluster.workers=2",
            f"workload.trace.path={json.dumps(str(trace))}", "workload.trace.trace_block_size=4",
            f'sinks.fpm=[{{type: prometheus, path: "{out}", model_name: sim, interval_s: 0.5}}]']
    result = simulate(load_config(None, sets))
    return result.report, out.read_text()


def _points(text: str) -> tuple[list[str], dict[tuple[str, str], list[tuple[float, float]]]]:
    """Family order, and every series' (timestamp, value) points in file order."""
    families, series = [], defaultdict(list)
    for line in text.splitlines():
        if line.startswith("# TYPE "):
            families.append(line.split()[2])
        elif not line.startswith("#"):
            m = LINE.match(line)
            assert m is not None, line
            series[(m["name"], m["labels"] or "")].append((float(m["ts"]), float(m["value"])))
    return families, series


def _final(series: dict, name: str, having: str = "") -> float:
    return sum(pts[-1][1] for (n, labels), pts in series.items() if n == name and having in labels)


def test_replay_file_totals_equal_the_report(tmp_path: Path) -> None:
    report, text = _replay(tmp_path)
    assert text.endswith("# EOF\n")
    families, series = _points(text)
    assert len(families) == len(set(families)) == 38  # each family once
    for (name, _labels), pts in series.items():
        stamps = [t for t, _ in pts]
        assert stamps == sorted(set(stamps)), name  # one point per scrape, in order
        assert stamps[0] == EPOCH + 0.5
        if name.endswith("_created"):
            assert {v for _, v in pts} == {EPOCH}
    n = report["completed"]
    assert _final(series, "vllm:request_success_total", 'finished_reason="length"') == n == 30
    assert _final(series, "vllm:prompt_tokens_total") == report["total_input_tokens"]
    assert _final(series, "vllm:generation_tokens_total") == report["total_output_tokens"]
    assert _final(series, "vllm:inter_token_latency_seconds_count") == report["total_output_tokens"] - n
    ttft = _final(series, "vllm:time_to_first_token_seconds_sum")
    assert abs(ttft - report["mean_ttft_ms"] * n / 1000.0) < 1e-6
    e2e = _final(series, "vllm:e2e_request_latency_seconds_sum")
    assert abs(e2e - report["mean_e2el_ms"] * n / 1000.0) < 1e-6
    hits = _final(series, "vllm:prefix_cache_hits_total") / _final(series, "vllm:prefix_cache_queries_total")
    assert round(hits, 6) == report["prefix_cache_hit_rate"]
    # both workers' engines are there, and the run's scrapes cover its simulated length
    assert {lab for (nm, lab) in series if nm == "vllm:num_requests_running"} == {
        '{model_name="sim",engine="0"}', '{model_name="sim",engine="1"}'}
    last = max(t for pts in series.values() for t, _ in pts)
    assert last - EPOCH >= report["duration"] > last - EPOCH - 0.5


def test_every_scrape_parses_as_openmetrics(tmp_path: Path) -> None:
    """prometheus-client's parser drops repeated points of one series (it reads them as
    duplicates), so each scrape is checked on its own, in the file's family order."""
    _report, text = _replay(tmp_path)
    by_ts: dict[str, dict[str, list[str]]] = defaultdict(lambda: defaultdict(list))
    header: dict[str, list[str]] = defaultdict(list)
    family = ""
    for line in text.splitlines():
        if line.startswith("# HELP "):
            family = line.split()[2]
        if line.startswith("#"):
            if line != "# EOF":
                header[family].append(line)
            continue
        by_ts[line.rsplit(" ", 1)[1]][family].append(line)
    assert len(by_ts) == 9  # 30 requests 150 ms apart, scraped every 0.5 s
    for ts, per_family in by_ts.items():
        parts = [x for fam in header for x in header[fam] + per_family[fam]]
        parsed = list(text_string_to_metric_families("\n".join(parts) + "\n# EOF\n"))
        assert len(parsed) == 38, ts


def test_files_are_byte_identical_across_runs(tmp_path: Path) -> None:
    assert _replay(tmp_path, name="a.om")[1] == _replay(tmp_path, name="b.om")[1]


def test_sglang_backend_writes_sglang_names(tmp_path: Path) -> None:
    report, text = _replay(tmp_path, backend="sglang")
    families, series = _points(text)
    assert families and all(f.startswith("sglang:") for f in families)
    assert _final(series, "sglang:num_requests_total") == report["completed"]
    assert _final(series, "sglang:generation_tokens_total") == report["total_output_tokens"]


@pytest.mark.skipif(shutil.which("promtool") is None,
                    reason="promtool (Debian package prometheus) not installed")
def test_promtool_creates_blocks_from_the_file(tmp_path: Path) -> None:
    _report, text = _replay(tmp_path)
    done = subprocess.run(["promtool", "tsdb", "create-blocks-from", "openmetrics",
                           str(tmp_path / "m.om"), str(tmp_path / "tsdb")],
                          capture_output=True, text=True, timeout=120, check=False)
    assert done.returncode == 0, done.stderr
    _families, series = _points(text)
    assert re.search(rf"\s{int(EPOCH * 1000) + 500}\s", done.stdout)  # the first scrape, in ms
    assert f" {len(series)} " in done.stdout  # every series became a TSDB series
