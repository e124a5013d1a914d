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


def test_results_at_a_finite_rate_under_max_concurrency_keep_their_send_times(tmp_path):
    """``--request-rate R --max-concurrency 2``: each result replays with the client's send
    times (drawn from its rate, burstiness and seed, also for saved per-request lengths) and at
    most two requests in flight, as the client's semaphore keeps them."""
    from servesim_benchclient import config as client_config
    from servesim_benchclient import draws
    from servesim_overhead.command import _drawn_send_times, _replay
    from servesim_overhead.results import Result

    sim = tmp_path / "sim.yaml"
    sim.write_text(SIM)

    def replay(client, lengths=None):
        return _replay(str(sim), [], Result("r", client, 40.0, 9.0, lengths), str(tmp_path), 0.0, 0.0)

    client = {"random_input_len": 256, "random_output_len": 16, "num_prompts": 8, "max_concurrency": 2,
              "request_rate": 50.0, "burstiness": 1.0, "seed": 4, "ignore_eos": True}
    cfg = client_config.build(client, "c")
    lengths = tuple(zip(*draws.lengths(cfg), strict=True))
    want = draws.send_times_ms(cfg)
    assert _drawn_send_times(Result("r", client, 40.0, 9.0, lengths)) == want
    assert want == sorted(want) and want[-1] > want[0] > 0
    # the client's options and its saved lengths are the same load
    assert replay(client) == replay(client, lengths)
    # at 50 req/s the cap binds (and uncapped runs differ); at 0.5 req/s requests never
    # overlap, so the cap changes nothing; at inf it is the closed loop of two
    assert replay(client, lengths) != replay({**client, "max_concurrency": None}, lengths)
    slow = {**client, "request_rate": 0.5}
    assert replay(slow, lengths) == replay({**slow, "max_concurrency": None}, lengths)
    assert replay({**client, "request_rate": "inf"}, lengths) != replay(client, lengths)
    # the client's warm-ups (copies of the first prompt) run first and are waited for: with
    # prefix caching on, vLLM's default, the first timed request finds its prompt cached
    warm, cold = replay({**client, "num_warmups": 3}), replay(client)
    assert warm[0] < cold[0] and warm[1] == cold[1]
    # with it off the timed requests see an idle, empty engine, as without them
    off = ["engine.enable_prefix_caching=false"]
    assert _replay(str(sim), off, Result("r", {**client, "num_warmups": 3}, 40.0, 9.0), str(tmp_path), 0.0, 0.0) \
        == _replay(str(sim), off, Result("r", client, 40.0, 9.0), str(tmp_path), 0.0, 0.0)


def test_saved_start_and_queue_times_are_the_schedule(tmp_path, capsys):
    """vLLM 0.32's detailed result: each request was due at its start time less its time
    waiting for the semaphore; the replay keeps that schedule."""
    from servesim_overhead.command import _replay

    saved = {"num_prompts": 3, "request_rate": 5.0, "burstiness": 1.0, "max_concurrency": 1,
             "mean_ttft_ms": 50.0, "mean_tpot_ms": 9.0, "input_lens": [500, 510, 520],
             "output_lens": [30, 31, 32], "start_times": [100.2, 100.9, 101.3],
             "queue_times": [0.0, 0.5, None]}
    path = tmp_path / "r.json"
    path.write_text(json.dumps(saved))
    (r,) = read(str(path), {})
    assert r.send_times_ms == pytest.approx((0.0, 200.0, 1100.0))
    sim = tmp_path / "sim.yaml"
    sim.write_text(SIM)
    # no semaphore: three requests sent together share passes, sent apart they do not
    apart = read_one(tmp_path, {**saved, "max_concurrency": None})
    together = read_one(tmp_path, {**saved, "max_concurrency": None, "start_times": [100.2] * 3,
                                   "queue_times": [0, 0, 0]})
    assert together.send_times_ms == (0.0, 0.0, 0.0)
    far = _replay(str(sim), [], apart, str(tmp_path), 0.0, 0.0)
    near = _replay(str(sim), [], together, str(tmp_path), 0.0, 0.0)
    assert near[0] > far[0]
    # without queue times under a semaphore the start times are dispatches: the rate's draws are used
    assert read_one(tmp_path, {k: v for k, v in saved.items() if k != "queue_times"}).send_times_ms is None
    for bad, problem in (({"start_times": ["x", 1, 2]}, "start_times must be a list of numbers"),
                         ({"start_times": [1, 2]}, "one entry per request"),
                         ({"input_lens": [1, 2]}, "differ in length")):
        bad_path = tmp_path / "bad.json"
        bad_path.write_text(json.dumps({**saved, **bad}))
        assert main(["fit-overhead", str(sim), str(bad_path), str(path)]) == 2
        err = capsys.readouterr().err.strip()
        assert problem in err and len(err.splitlines()) == 1


def read_one(tmp_path, rec):
    path = tmp_path / "one.json"
    path.write_text(json.dumps(rec))
    (r,) = read(str(path), {})
    return r
