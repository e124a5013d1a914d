"""Every example in README.md and docs/ works as written: YAML blocks load with the config
loader, the example trace and configuration replay, the shown error lines are the real ones,
and the Python snippets run."""

from __future__ import annotations

import json
import re
import shlex
from pathlib import Path
from typing import Any

import pytest
from servesim.cli.main import main
from servesim.config.loader import load_config

ROOT = Path(__file__).resolve().parents[2]
DOC_FILES = [
    ROOT / "README.md",
    *sorted((ROOT / "docs").glob("*.md")),
    *sorted(ROOT.glob("plugins/*/README.md")),
]

# Blocks that document settings still being built (issue 9): they flip to passing when it lands.
PENDING: dict[tuple[str, str], str] = {}


def blocks(path: Path, lang: str) -> list[tuple[int, str]]:
    """``(line, body)`` of every fenced block in ``lang``."""
    text = path.read_text()
    return [
        (text[: m.start()].count("\n") + 1, m.group(2))
        for m in re.finditer(r"^```(\w*)\n(.*?)^```$", text, re.M | re.S)
        if m.group(1) == lang
    ]


def yaml_cases() -> list[Any]:
    out = []
    for path in DOC_FILES:
        if path.name == "sweep.md":
            continue  # sweep files, not configs (tests/sweep/test_sweep_docs.py)
        for line, body in blocks(path, "yaml"):
            reason = next((r for (f, s), r in PENDING.items() if path.name == f and s in body), None)
            marks = [pytest.mark.xfail(strict=False, reason=reason)] if reason else []
            out.append(pytest.param(body, id=f"{path.relative_to(ROOT)}:{line}", marks=marks))
    return out


def command_sections(body: str) -> dict[str, type] | None:
    """The ``serve:`` section of ``servesim serve`` (servesim-serve owns it)."""
    if re.search(r"^serve:", body, re.M) is None:
        return None
    from servesim_serve.config import ServeConfig

    return {"serve": ServeConfig}


def test_the_docs_have_yaml_examples() -> None:
    assert len(yaml_cases()) >= 6


@pytest.mark.parametrize("body", yaml_cases())
def test_yaml_block_loads(tmp_path: Path, body: str) -> None:
    config = tmp_path / "sim.yaml"
    config.write_text(body)
    loaded = load_config(str(config), extra_sections=command_sections(body))
    assert loaded.sim.engine.backend in ("vllm", "sglang", "trtllm", "toy")


def test_trace_format_example_replays(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    ((_, body),) = blocks(ROOT / "docs" / "trace-formats.md", "json")
    trace = tmp_path / "t.jsonl"
    trace.write_text(body)
    assert main(["run", "--trace", str(trace), "--json"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert (report["num_requests"], report["completed"]) == (4, 4)
    assert report["total_output_tokens"] == 486 + 238 + 64 + 80


def test_trace_generator_snippet_and_command(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """The trace-writing snippet (shortened to 60 records) and the command after it."""
    doc = ROOT / "docs" / "trace-formats.md"
    snippet = next(b for _, b in blocks(doc, "python") if "trace.jsonl" in b)
    command = next(b for _, b in blocks(doc, "sh") if "--trace trace.jsonl" in b)
    monkeypatch.chdir(tmp_path)
    assert "range(1000)" in snippet
    exec(compile(snippet.replace("range(1000)", "range(60)"), str(doc), "exec"), {})  # noqa: S102
    argv = shlex.split(command)
    assert argv[0] == "servesim"
    assert main([*argv[1:], "--json"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert report["completed"] == 60
    assert report["config"]["cluster"]["workers"] == 4
    assert report["prefix_cache_hit_rate"] > 0  # the groups share their first two blocks


def test_configuration_example_runs(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The full example of configuration.md, with a small trace at the path it names."""
    body = next(
        b for _, b in blocks(ROOT / "docs" / "configuration.md", "yaml") if "sinks:\n  kv_events" in b
    )
    monkeypatch.chdir(tmp_path)
    (tmp_path / "traces").mkdir()
    rows = [{"timestamp": i * 100, "output_length": 8, "hash_ids": [i % 3, 10 + i]} for i in range(12)]
    (tmp_path / "traces" / "mooncake_trace.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    (tmp_path / "sim.yaml").write_text(body)
    assert main(["run", "sim.yaml", "--quiet"]) == 0
    report = json.loads((tmp_path / "out" / "report.json").read_text())
    assert report["completed"] == 12 and report["config"]["cluster"]["router"] == "kv"
    events = (tmp_path / "out" / "kv_events.jsonl").read_text().splitlines()
    assert json.loads(events[0])["type"] == "BlockStored"


def test_configuration_python_snippet(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    ((_, snippet),) = blocks(ROOT / "docs" / "configuration.md", "python")
    monkeypatch.chdir(tmp_path)
    (tmp_path / "sim.yaml").write_text("workload: {synthetic: {num_requests: 12}}\n")
    exec(compile(snippet, "configuration.md", "exec"), {})  # noqa: S102
    mean_ttft, hit_rate = capsys.readouterr().out.split()
    assert float(mean_ttft) > 0 and 0 <= float(hit_rate) <= 1


def error_line(argv: list[str], capsys: pytest.CaptureFixture[str]) -> str:
    assert main(argv) == 2
    return capsys.readouterr().err


def test_configuration_error_example(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    shown, unwritable = [b for _n, b in blocks(ROOT / "docs" / "configuration.md", "") if "error" in b]
    monkeypatch.chdir(tmp_path)
    Path("sim.yaml").write_text("engine:\n  max_num_seqs: abc\n")
    assert error_line(["validate", "sim.yaml"], capsys) == shown
    Path("out").write_text("")  # a file where the report's folder should be
    Path("sim.yaml").write_text("report:\n  output_json: out/r.json\n")
    assert error_line(["validate", "sim.yaml"], capsys) == unwritable


def test_trace_error_example(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    ((_, shown),) = [(n, b) for n, b in blocks(ROOT / "docs" / "trace-formats.md", "") if "error" in b]
    monkeypatch.chdir(tmp_path)
    Path("traces").mkdir()
    good = json.dumps({"timestamp": 0, "output_length": 1, "hash_ids": [1]})
    Path("traces/t.jsonl").write_text(good + "\n" * 16 + '{"timestamp": 1, "output_length": 1}\n')
    assert error_line(["run", "--trace", "traces/t.jsonl"], capsys) == shown


def test_run_usage_block_matches_the_parser(capsys: pytest.CaptureFixture[str]) -> None:
    doc = (ROOT / "docs" / "configuration.md").read_text()
    ((_, usage),) = [
        (n, b) for n, b in blocks(ROOT / "docs" / "configuration.md", "") if b.startswith("servesim run")
    ]
    assert main(["run", "--help"]) == 0
    help_text = capsys.readouterr().out
    documented = set(re.findall(r"--[a-z-]+", usage))
    real = set(re.findall(r"(--[a-z-]+)", help_text)) - {"--help"}
    assert documented == real
    assert all(f"| `{flag}" in doc for flag in real)


def test_configuration_composing_sinks_example_runs(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The composing-sinks example of configuration.md, on a small two-worker run."""
    body = next(b for _, b in blocks(ROOT / "docs" / "configuration.md", "yaml") if "type: tee" in b)
    monkeypatch.chdir(tmp_path)
    (tmp_path / "sim.yaml").write_text(body + "cluster: {workers: 2}\nengine: {num_gpu_blocks: 60}\n"
                                       "workload: {synthetic: {num_requests: 40}}\n")
    assert main(["run", "sim.yaml", "--quiet"]) == 0
    out = tmp_path / "out"
    every = [json.loads(line) for line in (out / "kv_events.jsonl").read_text().splitlines()]
    removed = [json.loads(line) for line in (out / "worker0_removed.jsonl").read_text().splitlines()]
    assert removed == [e for e in every if e["worker"] == 0 and e["type"] == "BlockRemoved"] and removed
    sampled = (out / "fpm_sample.jsonl").read_text().splitlines()
    records = [json.loads(line) for line in sampled]
    assert records and all(r["version"] == 1 and "scheduled_requests" in r for r in records)
