"""Lengths and send times against numbers the clients' own code produced
(data/oracle_draws.json, made by data/make_oracle_draws.py from vLLM 0.32 and InferenceX)."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest

from servesim_benchclient import config, draws

ORACLE = json.loads((Path(__file__).parent / "data" / "oracle_draws.json").read_text())


def _cfg(client: str, args: dict, **extra) -> config.BenchClientConfig:
    raw = {"client": client, "random_input_len": args["input_len"], "random_output_len": args["output_len"],
           "random_range_ratio": args["range_ratio"], "num_prompts": args["num_prompts"],
           "request_rate": args["rate"], "burstiness": args["burstiness"], "seed": args["seed"],
           "ignore_eos": True, **extra}
    return config.build(raw, "<test>")


@pytest.mark.parametrize("case", ORACLE["vllm"], ids=lambda c: f"seed{c['args']['seed']}")
def test_vllm_bench_serve_draws(case):
    special = case["args"]["special"]
    cfg = _cfg("vllm", case["args"], special_tokens=special)
    ins, outs = draws.lengths(cfg)
    # the client counts the prompt without the special tokens the server adds back
    assert [n - special for n in ins] == case["input_lens"]
    assert outs == case["output_lens"]
    assert draws.send_times_ms(cfg) == pytest.approx([s * 1000 for s in case["send_s"]], abs=1e-9)


@pytest.mark.parametrize("case", ORACLE["inferencemax"], ids=lambda c: f"seed{c['args']['seed']}")
def test_inferencemax_client_draws(case):
    cfg = _cfg("inferencemax", case["args"], vocab_size=32000)
    ins, outs = draws.lengths(cfg)
    assert ins == case["input_lens"]
    assert outs == case["output_lens"]
    assert draws.send_times_ms(cfg) == pytest.approx([s * 1000 for s in case["send_s"]], abs=1e-9)


def test_range_ratio_intervals_differ_between_clients():
    base = {"random_input_len": 1000, "random_output_len": 100, "random_range_ratio": 0.8,
            "num_prompts": 2000, "ignore_eos": True}
    v_in, _ = draws.lengths(config.build({**base, "client": "vllm"}, "<t>"))
    i_in, _ = draws.lengths(config.build({**base, "client": "inferencemax"}, "<t>"))
    # floor(1000 * (1 - 0.8)) is 199 in floating point, as in the client
    assert 199 <= min(v_in) and max(v_in) <= 1800 and min(v_in) < 300 and max(v_in) > 1700
    assert 800 <= min(i_in) and max(i_in) <= 1000


def test_vllm_burstiness_inf_is_constant_gaps_and_rescaled():
    cfg = config.build({"client": "vllm", "num_prompts": 4, "request_rate": 2, "burstiness": "inf",
                        "ignore_eos": True}, "<t>")
    assert draws.send_times_ms(cfg) == pytest.approx([500.0, 1000.0, 1500.0, 2000.0])


def test_vllm_range_ratio_mapping():
    cfg = config.build({"client": "vllm", "num_prompts": 50, "random_input_len": 100, "random_output_len": 10,
                        "random_range_ratio": {"input": 0.0, "output": 0.5}, "ignore_eos": True}, "<t>")
    ins, outs = draws.lengths(cfg)
    assert set(ins) == {100} and min(outs) >= 5 and max(outs) <= 15 and len(set(outs)) > 1
    assert math.isinf(cfg.request_rate)
