"""Regenerates oracle_draws.json from the benchmark clients' own code (not run by the tests).

Run with a Python that has vLLM 0.32 installed (the CPU build is enough) and with the
InferenceX client directory (``utils/bench_serving/`` of SemiAnalysisAI/InferenceX) on
``sys.path``::

    PYTHONPATH=/path/to/InferenceX/utils/bench_serving python make_oracle_draws.py > oracle_draws.json

A stand-in tokenizer maps token ids to text and back one to one, so the clients' decode /
re-encode loops keep every sampled length (a real tokenizer may move a prompt by a few tokens).
Arrival times are read by running each client's ``get_request`` on a virtual clock.
"""

from __future__ import annotations

import asyncio
import json
import random
import sys

import numpy as np


class Tok:
    vocab_size = 32000
    all_special_ids = [0, 1, 2]

    def __init__(self, special: int = 0) -> None:
        self.special = special

    def num_special_tokens_to_add(self) -> int:
        return self.special

    def decode(self, ids):
        return " ".join(str(int(i)) for i in ids)

    def encode(self, text, add_special_tokens=False):
        return [int(t) for t in text.split()] if text else []


def run_arrivals(module, requests, rate, burstiness, **kw):
    """Send times (s) of ``module.get_request`` on a virtual clock."""
    clock = [0.0]

    async def fake_sleep(dt):
        clock[0] += max(dt, 0.0)

    class FakeTime:
        @staticmethod
        def time():
            return clock[0]

        perf_counter = time

    module.asyncio.sleep = fake_sleep
    if hasattr(module, "time"):
        module.time = FakeTime

    async def go():
        out = []
        async for _ in module.get_request(requests, rate, burstiness, **kw):
            out.append(clock[0])
        return out

    return asyncio.run(go())


VLLM_CASES = [
    dict(seed=0, num_prompts=20, input_len=1024, output_len=128, range_ratio=0.8, special=0, rate=4.0, burstiness=1.0),
    dict(seed=7, num_prompts=15, input_len=4096, output_len=1024, range_ratio=0.5, special=1, rate=2.5, burstiness=0.5),
    dict(seed=42, num_prompts=12, input_len=333, output_len=77, range_ratio=0.0, special=0, rate=10.0, burstiness=3.0),
    dict(seed=3, num_prompts=8, input_len=1000, output_len=500, range_ratio=0.25, special=0, rate=float("inf"), burstiness=1.0),
]
IX_CASES = [
    dict(seed=0, num_prompts=20, input_len=1024, output_len=1024, range_ratio=0.8, rate=4.0, burstiness=1.0),
    dict(seed=5, num_prompts=16, input_len=8192, output_len=1024, range_ratio=0.8, rate=float("inf"), burstiness=1.0),
    dict(seed=11, num_prompts=10, input_len=1000, output_len=300, range_ratio=0.5, rate=3.0, burstiness=0.25),
]


def vllm_case(c):
    from vllm.benchmarks import serve
    from vllm.benchmarks.datasets.datasets import RandomDataset

    random.seed(c["seed"])
    np.random.seed(c["seed"])  # what vllm bench serve's main_async does first
    reqs = RandomDataset(random_seed=c["seed"]).sample(
        Tok(c["special"]), c["num_prompts"], range_ratio=c["range_ratio"],
        input_len=c["input_len"], output_len=c["output_len"])
    times = run_arrivals(serve, reqs, c["rate"], c["burstiness"])
    return {"input_lens": [r.prompt_len for r in reqs],
            "output_lens": [r.expected_output_len for r in reqs], "send_s": times}


def ix_case(c):
    import benchmark_serving as ix

    random.seed(c["seed"])
    np.random.seed(c["seed"])  # the client's main() does this first
    reqs = ix.sample_random_requests(0, c["input_len"], c["output_len"], c["num_prompts"],
                                     c["range_ratio"], Tok(), num_workers=1)
    times = run_arrivals(ix, reqs, c["rate"], c["burstiness"])
    return {"input_lens": [int(r[1]) for r in reqs], "output_lens": [int(r[2]) for r in reqs],
            "send_s": times}


def _jsonable(c):
    return {k: ("inf" if v == float("inf") else v) for k, v in c.items()}


if __name__ == "__main__":
    import vllm

    import contextlib

    with contextlib.redirect_stdout(sys.stderr):  # the clients print their statistics
        out = {"vllm_version": vllm.__version__,
               "vllm": [{"args": _jsonable(c), **vllm_case(c)} for c in VLLM_CASES],
               "inferencemax": [{"args": _jsonable(c), **ix_case(c)} for c in IX_CASES]}
    json.dump(out, sys.stdout, indent=1)
    sys.stdout.write("\n")
