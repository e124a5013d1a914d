"""``servesim fit-overhead``: results files, the fit, and its report."""

from __future__ import annotations

import json

import pytest

from servesim.cli.main import main
from servesim_overhead.fit import Sample, fit_terms, moved
from servesim_overhead.results import read

SIM = """\
engine:
  backend: vllm
  num_gpu_blocks: 4000
  timing_model: {type: overhead, inner: {type: polynomial}, cuda_graph_padding: false}
"""


def test_fit_recovers_terms_of_the_additive_model():
    truth = (2.0, 0.05)
    samples = [Sample(p, moved(Sample(p, 1, b), *truth, overlap=False), b)
               for p, b in ((10.0, 4), (12.0, 16), (20.0, 64), (8.0, 1))]
    assert fit_terms(samples, overlap=False) == pytest.approx(truth)


def test_reads_vllm_saved_result_with_metadata_and_detailed_lengths(tmp_path):
    saved = {"num_prompts": 3, "request_rate": "inf", "burstiness": 1.0, "max_concurrency": 2,
             "mean_ttft_ms": 50.0, "mean_tpot_ms": 9.0, "random_input_len": "512",
             "input_lens": [500, 510, 520], "output_lens": [30, 31, 32]}
    path = tmp_path / "r.json"
    path.write_text(json.dumps(saved))
    (r,) = read(str(path), {"random_output_len": 32})
    assert r.client["random_input_len"] == "512" and r.client["random_output_len"] == 32
    assert r.lengths == ((500, 30), (510, 31), (520, 32)) and r.measured_tpot_ms == 9.0


@pytest.mark.parametrize(("name", "text", "problem"), [
    ("r.jsonl", '{"num_prompts": 4, "mean_ttft_ms": "x", "mean_tpot_ms": 1}\n', "r.jsonl"),
    ("r.jsonl", "[" * 100_000 + "]" * 100_000 + "\n", "r.jsonl: cannot read results: JSON nested too deeply"),
    ("r.json", "[" * 100_000 + "]" * 100_000, "r.json: cannot read results: JSON nested too deeply"),
])
def test_bad_results_file_is_one_line(tmp_path, capsys, name, text, problem):
    sim = tmp_path / "sim.yaml"
    sim.write_text(SIM)
    bad = tmp_path / name
    bad.write_text(text)
    assert main(["fit-overhead", str(sim), str(bad)]) == 2
    err = capsys.readouterr().err.strip()
    assert problem in err
    assert len(err.splitlines()) == 1


def test_fit_overhead_end_to_end(tmp_path, capsys):
    sim = tmp_path / "sim.yaml"
    sim.write_text(SIM)
    rows = []
    for i, (c, tpot) in enumerate(((2, 9.0), (4, 10.5), (8, 12.0), (16, 15.0))):
        rows.append({"random_input_len": 256, "random_output_len": 16, "num_prompts": 4 * c, "max_concurrency": c,
                     "seed": i, "mean_ttft_ms": 40.0, "mean_tpot_ms": tpot})
    results = tmp_path / "results.jsonl"
    results.write_text("".join(json.dumps(r) + "\n" for r in rows))
    assert main(["fit-overhead", str(sim), str(results)]) == 0
    out = capsys.readouterr().out
    assert "held out  TPOT" in out and "engine.timing_model: step_ms:" in out
    assert main(["fit-overhead", str(sim), str(results)]) == 0
    assert capsys.readouterr().out == out  # deterministic
