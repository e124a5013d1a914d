"""The ``bench_client`` trace format: files, command lines, errors, determinism."""

from __future__ import annotations

import pytest

from servesim.cli.main import main
from servesim.errors import ConfigError
from servesim.testing import check_trace_format
from servesim_benchclient.reader import BenchClientFormat

GOOD = """\
client: inferencemax
random_input_len: 1024
random_output_len: 256
random_range_ratio: 0.8
num_prompts: 12
max_concurrency: 4
request_rate: inf
ignore_eos: true
random_prefix_len: 300
vocab_size: 151643
"""


def _write(tmp_path, text, name="client.yaml"):
    p = tmp_path / name
    p.write_text(text)
    return str(p)


def test_trace_kit(tmp_path):
    report = check_trace_format(BenchClientFormat, _write(tmp_path, GOOD))
    assert report.ok, report.failures


def test_workload_shape(tmp_path):
    wl = BenchClientFormat.read(_write(tmp_path, GOOD), trace_block_size=64)
    turns = wl.turns()
    assert wl.num_requests == 12
    assert [s.start_ms for s in wl.sessions] == [0.0] * 12
    # 300 prefix tokens: four whole 64-token blocks shared by every prompt, then own blocks
    a, b = turns[0].prompt.hash_ids, turns[1].prompt.hash_ids
    assert tuple(a[:4]) == tuple(b[:4]) == (0, 1, 2, 3) and set(a[4:]).isdisjoint(b[4:])
    assert all(1 <= t.output_length <= 256 for t in turns)
    assert all(300 + 819 <= t.input_length <= 300 + 1024 for t in turns)


def test_command_line(tmp_path):
    text = ("command: >-\n  vllm bench serve --model Qwen/Qwen3-32B --dataset-name random\n"
            "  --random-input-len 2000 --random-output-len 50 --random-range-ratio 0.5\n"
            "  --num-prompts 6 --request-rate 3 --burstiness 0.5 --seed 9 --ignore-eos --save-result\n")
    wl = BenchClientFormat.read(_write(tmp_path, text), trace_block_size=16)
    explicit = _write(tmp_path, "random_input_len: 2000\nrandom_output_len: 50\nrandom_range_ratio: 0.5\n"
                      "num_prompts: 6\nrequest_rate: 3\nburstiness: 0.5\nseed: 9\nignore_eos: true\n", "b.yaml")
    wl2 = BenchClientFormat.read(explicit, trace_block_size=16)
    assert [(s.start_ms, s.turns[0].input_length, s.turns[0].output_length) for s in wl.sessions] == \
        [(s.start_ms, s.turns[0].input_length, s.turns[0].output_length) for s in wl2.sessions]
    assert wl.sessions[0].start_ms > 0  # vllm sends even the first request after a gap


@pytest.mark.parametrize(("text", "key"), [
    ("random_range_ratio: 1.0\nignore_eos: true\n", "random_range_ratio"),
    ("ignore_eos: false\n", "ignore_eos"),
    ("num_prompts: 0\nignore_eos: true\n", "num_prompts"),
    ("request_rate: 0\nignore_eos: true\n", "request_rate"),
    ("burstiness: -1\nignore_eos: true\n", "burstiness"),
    ("num_promts: 3\n", "num_promts"),
    ("client: sglang\n", "client"),
    ("dataset_name: sharegpt\n", "dataset_name"),
    ("client: inferencemax\nrequest_rate: 2\nignore_eos: true\n", "vocab_size"),
    ("command: vllm bench serve --random-input-len abc --ignore-eos\n", "random_input_len"),
    ("command: vllm bench serve --use-chat-template --ignore-eos\n", "command"),
])
def test_bad_options_name_the_key(tmp_path, text, key):
    path = _write(tmp_path, text)
    with pytest.raises(ConfigError) as err:
        BenchClientFormat.read(path, trace_block_size=16)
    assert f"{path}: {key}" in str(err.value) and "\n" not in str(err.value)


def test_finite_rate_under_max_concurrency(tmp_path):
    """``--request-rate 40 --max-concurrency 2``: the send times are kept, and the replay must
    cap its sessions at the client's number."""
    from servesim.config.loader import load_config
    from servesim.replay.runner import simulate

    client = _write(tmp_path, "random_input_len: 64\nrandom_output_len: 8\nnum_prompts: 6\n"
                    "max_concurrency: 2\nrequest_rate: 40\nignore_eos: true\nseed: 3\n")
    wl = BenchClientFormat.read(client, trace_block_size=16)
    assert wl.client_concurrency == 2
    sends = [s.start_ms for s in wl.sessions]
    assert sends == sorted(sends) and sends[0] > 0
    timing = "{type: fixed, prefill_ms: 30.0, decode_ms: 10.0}"
    cfg = _write(tmp_path, f"engine: {{backend: vllm, timing_model: {timing}}}\n"
                 f"workload:\n  trace: {{format: bench_client, path: {client}}}\n", "run.yaml")
    log = simulate(load_config(cfg, ["workload.max_concurrency=2"])).log
    base = sends[0]
    # each request takes 30 + 7 x 10 = 100 ms; at 40 req/s the third is due before a slot frees
    assert log.arrival[:2] == [0.0, sends[1] - base]
    assert log.arrival[2] == max(sends[2] - base, log.done[0])
    assert all(a >= s - base for a, s in zip(log.arrival, sends, strict=True))
    assert max(sum(1 for b, e in zip(log.arrival, log.done, strict=True) if b <= a < e)
               for a in log.arrival) == 2
    for sets, key in ((["workload.max_concurrency=3"], "workload.max_concurrency"),
                      (["workload.concurrency=3"], "workload.concurrency"), ([], "workload.max_concurrency")):
        with pytest.raises(ConfigError) as err:
            simulate(load_config(cfg, sets))
        assert err.value.path == key and "keeps 2 requests in flight" in str(err.value)
    assert main(["run", cfg]) == 2


def test_cli_run_is_one_line_exit_2(tmp_path, capsys):
    client = _write(tmp_path, "random_range_ratio: 2\nignore_eos: true\n")
    cfg = _write(tmp_path, f"workload:\n  trace: {{format: bench_client, path: {client}}}\n", "run.yaml")
    assert main(["run", cfg]) == 2
    err = capsys.readouterr().err.strip()
    assert "random_range_ratio" in err and len(err.splitlines()) == 1


def test_docs_client_file_example(tmp_path):
    import re
    from pathlib import Path

    doc = Path(__file__).resolve().parents[3] / "docs" / "trace-formats.md"
    body = next(m.group(1) for m in re.finditer(r"^```text\n(.*?)^```$", doc.read_text(), re.M | re.S)
                if "# client.yaml" in m.group(1))
    wl = BenchClientFormat.read(_write(tmp_path, body), trace_block_size=16)
    assert wl.num_requests == 640 and all(s.start_ms == 0 for s in wl.sessions)
    assert all(204 <= t.input_length <= 1844 for t in wl.turns())


def test_warmups_lead_the_workload_and_hold_the_timed_run(tmp_path):
    """``--num-warmups 3 --max-concurrency 2``: three copies of the first prompt run first,
    two at a time, and the timed requests start only once all three have ended."""
    from servesim.config.loader import load_config
    from servesim.replay.runner import simulate

    client = _write(tmp_path, "random_input_len: 64\nrandom_output_len: 8\nnum_prompts: 4\n"
                    "max_concurrency: 2\nrequest_rate: inf\nignore_eos: true\nnum_warmups: 3\n")
    wl = BenchClientFormat.read(client, trace_block_size=16)
    assert wl.client_warmups == 3 and wl.num_requests == 7
    assert [s.session_id for s in wl.sessions] == ["warmup_0", "warmup_1", "warmup_2",
                                                   "request_0", "request_1", "request_2", "request_3"]
    turns = wl.turns()
    first = turns[3]
    assert all(tuple(t.prompt.hash_ids) == tuple(first.prompt.hash_ids) and t.output_length == first.output_length
               for t in turns[:3])
    timing = "{type: fixed, prefill_ms: 30.0, decode_ms: 10.0}"
    cfg = _write(tmp_path, f"engine: {{backend: vllm, timing_model: {timing}, enable_prefix_caching: false}}\n"
                 f"workload:\n  trace: {{format: bench_client, path: {client}}}\n"
                 "  max_concurrency: 2\n  warmup: {requests: 3, wait: true}\n", "run.yaml")
    res = simulate(load_config(cfg))
    # warm-ups: two at 0 (30 + 7 x 10 = 100 ms each), the third from 100 to 200; the timed
    # run starts at 200, two at a time
    assert res.report["warmup"] == {"requests": 3, "measured_from_ms": 200.0}
    assert res.report["num_requests"] == 4 and res.log.arrival == [200.0, 200.0, 300.0, 300.0]
    with pytest.raises(ConfigError) as err:
        simulate(load_config(cfg, ["workload.warmup={requests: 3}"]))
    assert err.value.path == "workload.warmup" and "3 warm-up requests" in str(err.value)
    assert main(["run", cfg, "--set", "workload.warmup=null"]) == 2
