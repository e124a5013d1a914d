"""``servesim validate`` checks what a run would write, creating nothing: the report's output
files, the figures folder and the JSONL sinks' files; ``servesim run`` and ``servesim
sweep`` check theirs before the first pass or point, so a long run never fails at its end.
Its summary counts the workers of every pool and role."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from servesim.cli.main import main
from servesim.plugins import servesim_version

from tests.qa.test_bad_input import fail, write

VERSION = servesim_version()
SINKS = f"(plugin servesim.builtins.sinks from servesim {VERSION})"


@pytest.fixture
def places(tmp_path: Path) -> dict[str, str]:
    (tmp_path / "folder").mkdir()
    (tmp_path / "file").write_text("x")
    return {"folder": str(tmp_path / "folder"), "file": str(tmp_path / "file"),
            "under_file": str(tmp_path / "file" / "sub" / "x.json"),
            "new": str(tmp_path / "new" / "deeper" / "x.json")}


def _cases(p: dict[str, str]) -> list[tuple[str, str]]:
    return [
        (f"report.output_json={p['folder']}",
         f"report.output_json: cannot write {p['folder']!r}: it is a directory"),
        (f"report.output_json={p['under_file']}",
         f"report.output_json: cannot write {p['under_file']!r}: its folder {p['file']!r} is a file"),
        (f"report.per_request={p['folder']}",
         f"report.per_request: cannot write {p['folder']!r}: it is a directory"),
        (f"report.plot={p['file']}",
         f"report.plot: cannot write the figures folder {p['file']!r}: it is a file"),
        (f"sinks.fpm=[{{type: jsonl, path: {p['under_file']}}}]",
         f"sinks.fpm[0]: jsonl fpm sink {p['under_file']!r}: cannot open: its folder "
         f"{p['file']!r} is a file {SINKS}"),
        (f"sinks.kv_events=[{{type: tee, sinks: [{{type: jsonl, path: {p['folder']}}}]}}]",
         f"sinks.kv_events[0].sinks[0]: jsonl kv-event sink {p['folder']!r}: cannot open: "
         f"it is a directory {SINKS}"),
    ]


def test_validate_rejects_unwritable_outputs(
    tmp_path: Path, places: dict[str, str], capsys: pytest.CaptureFixture[str]
) -> None:
    config = write(tmp_path, "sim.yaml", "")
    for item, message in _cases(places):
        assert fail(["validate", config, "--set", item], capsys) == f"{config}: {message}"
    assert sorted(os.listdir(tmp_path)) == ["file", "folder", "sim.yaml"]  # nothing created


def test_validate_accepts_outputs_in_folders_a_run_creates(
    tmp_path: Path, places: dict[str, str], capsys: pytest.CaptureFixture[str]
) -> None:
    config = write(tmp_path, "sim.yaml", "")
    sets = [f"report.output_json={places['new']}", f"report.per_request={places['new']}l",
            f"report.plot={tmp_path / 'new' / 'figs'}",
            f"sinks.fpm=[{{type: jsonl, path: {places['new']}.fpm}}]",
            f"report.output_json={places['file']}"]  # an existing file is overwritten
    for item in sets:
        assert main(["validate", config, "--set", item]) == 0
    capsys.readouterr()
    assert not (tmp_path / "new").exists()


def test_run_checks_the_same_outputs_before_the_first_pass(
    tmp_path: Path, places: dict[str, str], capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    import servesim.replay.runner as runner

    def no_run(*_args: object, **_kwargs: object) -> None:
        raise AssertionError("the run started")

    folder, under_file = places["folder"], places["under_file"]
    early = [(f"report.output_json={folder}",
              f"report.output_json: cannot write {folder!r}: it is a directory"),
             (f"report.plot={places['file']}",
              f"report.plot: cannot create the figures folder {places['file']!r}: File exists")]
    monkeypatch.setattr(runner.Replayer, "run", no_run)
    for item, message in early:
        assert fail(["run", "--set", "workload.synthetic.num_requests=2", "--set", item],
                    capsys) == message
    # sinks open their files when built, before the replay starts
    item = f"sinks.fpm=[{{type: jsonl, path: {under_file}}}]"
    assert fail(["run", "--set", item], capsys) == (
        f"sinks.fpm[0]: jsonl fpm sink {under_file!r}: cannot open: "
        f"Not a directory {SINKS}")


def test_sweep_checks_its_tables_before_any_point_runs(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    sweep = write(tmp_path, "sw.yaml", "base: {workload: {synthetic: {num_requests: 3}}}\n")
    out = tmp_path / "out"
    (out / "results.parquet").mkdir(parents=True)
    assert fail(["sweep", sweep, "--out", str(out), "--parallel", "1"], capsys) == (
        f"--out: cannot write {str(out / 'results.parquet')!r}: it is a directory")
    assert list((out / "points").iterdir()) == []


@pytest.mark.skipif(os.geteuid() == 0, reason="root may write into a read-only folder")
def test_validate_rejects_a_read_only_folder(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    locked = tmp_path / "locked"
    locked.mkdir()
    locked.chmod(0o555)
    config = write(tmp_path, "sim.yaml", "")
    target = str(locked / "r.json")
    assert fail(["validate", config, "--set", f"report.output_json={target}"], capsys) == (
        f"{config}: report.output_json: cannot write {target!r}: its folder {str(locked)!r} "
        "is not writable")


@pytest.mark.parametrize(("cluster", "summary"), [
    ("{pools: [{name: big, workers: 3}, {name: small, workers: 1}]}",
     "4 workers in 2 pools (big 3, small 1)"),
    ("{pools: [{name: only, workers: 1}]}", "1 worker in 1 pool (only 1)"),
    ("{prefill_workers: 2, decode_workers: 1}", "2 prefill + 1 decode worker"),
    ("{workers: 1}", "1 worker"),
])
def test_validate_counts_every_pools_workers(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], cluster: str, summary: str
) -> None:
    config = write(tmp_path, "sim.yaml", f"cluster: {cluster}\n")
    assert main(["validate", config]) == 0
    assert capsys.readouterr().out == (
        f"OK: {config}: backend vllm (block_size 64, dp_size 1), timing polynomial, eviction lru, {summary}, "
        "router round_robin, workload synthetic\n")
