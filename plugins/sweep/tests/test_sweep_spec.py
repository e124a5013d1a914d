"""The sweep file: expansion into points, stable ids, GPU counting, objectives, the Pareto
front, and errors naming the file and key path."""

from __future__ import annotations

import pytest
from servesim.cli.main import main
from servesim.errors import ConfigError
from servesim_sweep.pareto import front
from servesim_sweep.point import check_points, gpus_of
from servesim_sweep.results import Config, best, evaluate
from servesim_sweep.spec import Constraint, Objectives, load_sweep


def _file(tmp_path, text: str) -> str:
    path = tmp_path / "sweep.yaml"
    path.write_text(text)
    return str(path)


def test_grid_points_and_seeds_expand_in_order(tmp_path) -> None:
    sweep = load_sweep(_file(tmp_path, """
grid:
  engine.max_num_seqs: [8, 16]
  cluster.workers: [1, 2]
points:
  - {cluster.workers: 3}
  - {engine.max_num_seqs: 8, cluster.workers: 1}   # also in the grid: runs once per seed
seeds: [5, 6]
"""))
    got = [(dict(p.overrides), p.seed) for p in sweep.points]
    assert got == [
        ({"engine.max_num_seqs": 8, "cluster.workers": 1}, 5),
        ({"engine.max_num_seqs": 8, "cluster.workers": 1}, 6),
        ({"engine.max_num_seqs": 8, "cluster.workers": 2}, 5),
        ({"engine.max_num_seqs": 8, "cluster.workers": 2}, 6),
        ({"engine.max_num_seqs": 16, "cluster.workers": 1}, 5),
        ({"engine.max_num_seqs": 16, "cluster.workers": 1}, 6),
        ({"engine.max_num_seqs": 16, "cluster.workers": 2}, 5),
        ({"engine.max_num_seqs": 16, "cluster.workers": 2}, 6),
        ({"cluster.workers": 3}, 5),
        ({"cluster.workers": 3}, 6),
    ]
    assert sweep.origins[-1] == "points[0]" and sweep.origins[0] == "grid"
    assert sweep.points[0].sets() == ["engine.max_num_seqs=8", "cluster.workers=1",
                                      "workload.seed=5"]
    ids = [p.id for p in sweep.points]
    assert len(set(ids)) == len(ids) and all(len(i) == 13 for i in ids)
    again = load_sweep(_file(tmp_path, "points: [{cluster.workers: 3}]\nseeds: [6]\n"))
    assert again.points[0].id == sweep.points[-1].id  # ids survive editing the sweep
    assert sweep.objectives == Objectives()  # max output_throughput_per_gpu by default
    assert (sweep.pareto_x, sweep.pareto_y) == ("p99_ttft_ms", "output_throughput_per_gpu")


def test_no_grid_nor_points_is_the_base_once(tmp_path) -> None:
    sweep = load_sweep(_file(tmp_path, "base: {engine: {max_num_seqs: 4}}\n"))
    assert [(p.overrides, p.seed) for p in sweep.points] == [((), None)]
    assert sweep.base == {"engine": {"max_num_seqs": 4}}


@pytest.mark.parametrize("text, where", [
    ("grid: {engine.max_num_seqs: 8}\n", "grid.engine.max_num_seqs: expected a non-empty list"),
    ("grid: [1]\n", "grid: expected a mapping"),
    ("points: [{cluster.workers: 2}, 3]\n", "points[1]: expected a mapping"),
    ("points: [{'bad key': 2}]\n", "points[0].bad key: expected a dotted config key"),
    ("seeds: [1, x]\n", "seeds: expected a non-empty list of integers"),
    ("seeds: [1, 1]\n", "seeds: seeds repeat"),
    ("base: nothere.yaml\n", "base: no such config file 'nothere.yaml'"),
    ("base: 3\n", "base: expected a config file path or an inline config mapping"),
    ("grids: {}\n", "grids: unknown key"),
    ("objectives: {maximize: a, minimize: b}\n", "objectives: give exactly one of"),
    ("objectives: {maximise: a}\n", "objectives.maximise: unknown key"),
    ("objectives: {maximize: a, subject_to: ['p99_ttft_ms < = 5']}\n",
     "objectives.subject_to[0]: expected 'KEY OP NUMBER'"),
    ("pareto: {x: 1}\n", "pareto.x: expected a report key"),
])
def test_bad_sweep_files_name_file_and_key_path(tmp_path, capsys, text, where) -> None:
    path = _file(tmp_path, text)
    with pytest.raises(ConfigError) as info:
        load_sweep(path)
    assert str(info.value).startswith(f"{path}: {where}")
    assert main(["sweep", path, "--out", str(tmp_path / "o")]) == 2
    assert capsys.readouterr().err == f"servesim: error: {info.value}\n"


def test_bad_config_keys_are_named_by_their_override(tmp_path) -> None:
    path = _file(tmp_path, "grid: {engine.max_num_seqz: [4]}\n")
    sweep = load_sweep(path)
    with pytest.raises(ConfigError) as info:
        check_points(sweep, _base(tmp_path))
    assert str(info.value).startswith(f"{path}: grid.engine.max_num_seqz: ")
    path = _file(tmp_path, "points: [{cluster.workers: 1}, {cluster.workers: -1}]\n")
    with pytest.raises(ConfigError) as info:
        check_points(load_sweep(path), _base(tmp_path))
    assert str(info.value).startswith(f"{path}: points[1].cluster.workers: ")
    assert "(point workers=-1)" in str(info.value)


def test_inline_base_errors_are_named_under_base(tmp_path) -> None:
    from servesim_sweep.point import base_path

    path = _file(tmp_path, "base: {engine: {max_num_seqs: many}}\n")
    sweep = load_sweep(path)
    with pytest.raises(ConfigError) as info:
        check_points(sweep, base_path(sweep, str(tmp_path)))
    assert str(info.value).startswith(f"{path}: base.engine.max_num_seqs: ")


def _base(tmp_path) -> str:
    base = tmp_path / "base.yaml"
    base.write_text("workload: {synthetic: {num_requests: 5}}\n")
    return str(base)


def test_gpus_are_tp_times_dp_per_worker() -> None:
    agg = {"engine": {"dp_size": 2, "timing_model": {"type": "x", "tp": 4}},
           "cluster": {"workers": 3, "prefill_workers": 0, "decode_workers": 0}}
    assert gpus_of(agg) == 24
    split = {"engine": {"dp_size": 1, "timing_model": {"type": "x"}},
             "cluster": {"workers": 1, "prefill_workers": 2, "decode_workers": 3,
                         "prefill_engine": {"timing_model": {"tp_size": 2}},
                         "decode_engine": {"dp_size": 4}}}
    assert gpus_of(split) == 2 * 2 + 3 * 4


def test_constraints_and_best_use_means_over_seeds() -> None:
    def rec(i: str, workers: int, tput: float, ttft: float, ok: bool = True) -> dict:
        report = {"output_throughput": tput, "p99_ttft_ms": ttft} if ok else None
        return {"id": i, "overrides": {"cluster.workers": workers}, "status": "ok" if ok else "failed",
                "gpus": workers, "report": report}

    records = [rec("a", 1, 100, 400), rec("b", 1, 120, 700),  # mean 550: infeasible
               rec("c", 2, 300, 100), rec("d", 2, 0, 0, ok=False),  # the failed seed is left out
               rec("e", 4, 480, 300), rec("f", 4, 520, 300)]
    labels = ["workers=1"] * 2 + ["workers=2"] * 2 + ["workers=4"] * 2
    objectives = Objectives("output_throughput_per_gpu", 1, (Constraint("p99_ttft_ms", "<=", 500),))
    configs = evaluate(records, labels, objectives)
    assert [c.values for c in configs] == [
        {"output_throughput_per_gpu": 110.0, "p99_ttft_ms": 550.0, "gpus": 1.0},
        {"output_throughput_per_gpu": 150.0, "p99_ttft_ms": 100.0, "gpus": 2.0},
        {"output_throughput_per_gpu": 125.0, "p99_ttft_ms": 300.0, "gpus": 4.0},
    ]
    assert [c.feasible for c in configs] == [False, True, True]
    assert [c.label for c in best(configs, objectives)] == ["workers=2", "workers=4"]
    lowest = Objectives("p99_ttft_ms", -1, ())
    assert [c.label for c in best(evaluate(records, labels, lowest), lowest)] == [
        "workers=2", "workers=4", "workers=1"]


def test_pareto_front_keeps_the_undominated() -> None:
    pts = [(100.0, 5.0), (50.0, 3.0), (200.0, 9.0), (120.0, 4.0), (50.0, 2.0), (300.0, 9.0)]
    assert front(pts) == [1, 0, 2]
    assert front([]) == []
    assert Config("x", ("a",), {}, False).label == "x"
