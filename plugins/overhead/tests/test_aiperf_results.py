"""AIPerf's exports read as benchmark results for ``servesim fit-overhead``."""

from __future__ import annotations

import json

import pytest
from servesim.cli.main import main
from servesim.errors import UserError
from servesim_overhead.results import read


def _export(isl=512, osl=64, stddev=0.0, loadgen=None, ttft=41.5, itl=7.25):
    return {
        "time_to_first_token": {"unit": "ms", "avg": ttft, "p50": ttft},
        "inter_token_latency": {"unit": "ms", "avg": itl},
        "request_count": {"unit": "requests", "avg": 20.0},
        "input_config": {
            "endpoint": {"type": "chat", "streaming": True},
            "input": {"random_seed": 7, "prompt": {"input_tokens": {"mean": isl, "stddev": stddev},
                                                   "output_tokens": {"mean": osl}}},
            "loadgen": loadgen if loadgen is not None else {"concurrency": 4, "request_count": 20},
        },
    }


def _write(tmp_path, name, obj):
    path = tmp_path / name
    path.write_text(json.dumps(obj))
    return str(path)


def test_aggregate_export_gives_the_closed_loop_load_and_the_means(tmp_path):
    (r,) = read(_write(tmp_path, "profile_export_aiperf.json", _export()), {})
    assert r.client == {"client": "vllm", "random_range_ratio": 0.0, "ignore_eos": True,
                        "random_input_len": 512, "random_output_len": 64, "seed": 7, "max_concurrency": 4,
                        "num_prompts": 20, "request_rate": "inf"}
    assert (r.measured_ttft_ms, r.measured_tpot_ms, r.lengths) == (41.5, 7.25, None)


def test_request_rate_with_gamma_arrivals_is_vllm_burstiness(tmp_path):
    export = _export(loadgen={"request_rate": 2.5, "arrival_pattern": "gamma", "arrival_smoothness": 0.5,
                              "request_count": 30})
    (r,) = read(_write(tmp_path, "profile_export_aiperf.json", export), {})
    assert (r.client["request_rate"], r.client["burstiness"], r.client["num_prompts"]) == (2.5, 0.5, 30)
    assert "max_concurrency" not in r.client
    constant = _export(loadgen={"request_rate": 2.5, "arrival_pattern": "constant"})
    with pytest.raises(UserError, match="'constant' arrival pattern"):
        read(_write(tmp_path, "c.json", constant), {})


def test_per_request_records_replace_drawn_lengths_without_warmups_or_errors(tmp_path):
    records = [
        {"metadata": {"benchmark_phase": "warmup"}, "metrics": {"input_sequence_length": {"value": 9},
                                                                "output_sequence_length": {"value": 9}}},
        {"metadata": {"benchmark_phase": "profiling"}, "metrics": {"input_sequence_length": {"value": 498},
                                                                   "output_sequence_length": {"value": 64}}},
        {"metadata": {"benchmark_phase": "profiling"}, "metrics": {"error_isl": {"value": 510}},
         "error": {"code": 500, "type": "InternalServerError", "message": "x"}},
        {"metadata": {"benchmark_phase": "profiling"}, "metrics": {"input_sequence_length": {"value": 530},
                                                                   "output_sequence_length": {"value": 61}}},
    ]
    (tmp_path / "profile_export.jsonl").write_text("".join(json.dumps(r) + "\n" for r in records))
    (r,) = read(_write(tmp_path, "profile_export_aiperf.json", _export(stddev=25.0)), {})
    assert r.lengths == ((498, 64), (530, 61))


@pytest.mark.parametrize(("line", "problem"), [
    ("[1, 2]", "profile_export.jsonl:2: expected a JSON object"),
    ("{nope", "profile_export.jsonl:2: invalid JSON"),
    ("[" * 100_000 + "]" * 100_000, "profile_export.jsonl:2: JSON nested too deeply to read"),
])
def test_a_bad_per_request_record_names_file_and_line(tmp_path, line, problem):
    good = {"metadata": {"benchmark_phase": "profiling"},
            "metrics": {"input_sequence_length": {"value": 498}, "output_sequence_length": {"value": 64}}}
    (tmp_path / "profile_export.jsonl").write_text(json.dumps(good) + "\n" + line + "\n")
    with pytest.raises(UserError, match=problem):
        read(_write(tmp_path, "profile_export_aiperf.json", _export(stddev=25.0)), {})


def test_spread_lengths_without_records_name_the_missing_file(tmp_path):
    with pytest.raises(UserError, match="profile_export.jsonl"):
        read(_write(tmp_path, "profile_export_aiperf.json", _export(stddev=25.0)), {})
    with pytest.raises(UserError, match="inter_token_latency.avg"):
        read(_write(tmp_path, "n.json", {**_export(), "inter_token_latency": {"unit": "ms"}}), {})


def test_fit_overhead_reads_aiperf_exports(tmp_path, capsys):
    sim = tmp_path / "sim.yaml"
    sim.write_text("engine:\n  backend: vllm\n  num_gpu_blocks: 4000\n"
                   "  timing_model: {type: overhead, inner: {type: polynomial}, cuda_graph_padding: false}\n")
    paths = []
    for c, itl in ((2, 9.0), (4, 10.5), (8, 12.0)):
        run = tmp_path / f"c{c}"
        run.mkdir()
        load = {"concurrency": c, "request_count": 4 * c}
        export = _export(isl=256, osl=16, loadgen=load, itl=itl)
        paths.append(_write(run, "profile_export_aiperf.json", export))
    assert main(["fit-overhead", str(sim), *paths]) == 0
    out = capsys.readouterr().out
    assert out.count("profile_export_aiperf.json") == 3 and "held out  TPOT" in out


def _record(isl, osl, start_ns=None):
    meta = {"benchmark_phase": "profiling"}
    if start_ns is not None:
        meta["request_start_ns"] = start_ns
    return {"metadata": meta, "metrics": {"input_sequence_length": {"value": isl},
                                          "output_sequence_length": {"value": osl}}}


def test_request_rate_records_keep_their_send_times(tmp_path):
    records = [_record(498, 64, 5_000_000_000), _record(530, 61, 5_250_000_000),
               _record(512, 60, 5_900_000_000)]
    (tmp_path / "profile_export.jsonl").write_text("".join(json.dumps(r) + "\n" for r in records))
    rate = _export(loadgen={"request_rate": 4.0, "request_count": 3})
    (r,) = read(_write(tmp_path, "profile_export_aiperf.json", rate), {})
    assert r.send_times_ms == (0.0, 250.0, 900.0)
    # under a concurrency limit AIPerf's waits delay the rest of its schedule: the recorded
    # sends are the schedule, replayed under the same limit
    limited = _export(loadgen={"request_rate": 4.0, "request_count": 3, "concurrency": 2})
    (r,) = read(_write(tmp_path, "profile_export_aiperf.json", limited), {})
    assert r.send_times_ms == (0.0, 250.0, 900.0) and r.client["max_concurrency"] == 2
    assert r.lengths == ((498, 64), (530, 61), (512, 60))
    # a record without a start time: none are used
    records[1] = _record(530, 61)
    (tmp_path / "profile_export.jsonl").write_text("".join(json.dumps(r) + "\n" for r in records))
    (r,) = read(_write(tmp_path, "profile_export_aiperf.json", rate), {})
    assert r.send_times_ms is None
