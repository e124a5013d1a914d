"""The lengths and send times a benchmark client draws, drawn the same way.

``vllm`` (``vllm bench serve``, vLLM 0.32):

* lengths (``vllm/benchmarks/datasets/utils.py`` ``get_sampling_params``, called by
  ``RandomDataset.sample``): one ``numpy.random.default_rng(seed)`` draws every input length
  with ``integers(lo, hi + 1)``, then every output length. The input interval is
  ``[floor(L' (1 - r)), ceil(L' (1 + r))]`` around ``L' = max(0, L - special tokens)`` (the
  tokenizer's ``num_special_tokens_to_add()``), the output interval
  ``[max(1, floor(O (1 - r))), max(1, ceil(O (1 + r)))]``: symmetric around the flag, so
  ``--random-range-ratio 0.8`` spans 0.2 L to 1.8 L. The fixed random prefix is added to
  every prompt, and the server adds the special tokens back when it tokenizes the text;
* send times (``vllm/benchmarks/serve.py`` ``get_request``): ``main_async`` seeds numpy's
  legacy global generator with ``seed``; each request's gap is
  ``np.random.gamma(shape=burstiness, scale=1 / (request_rate * burstiness))`` (the first
  request's too), or ``1 / request_rate`` when ``burstiness`` is ``inf``, or 0 when
  ``request_rate`` is ``inf``. The cumulative gaps are rescaled so the last one is
  ``num_prompts / request_rate`` exactly.

``inferencemax`` (InferenceMAX / InferenceX ``utils/bench_serving/benchmark_serving.py``):

* lengths (``sample_random_requests``): numpy's legacy global generator, seeded with
  ``seed``, draws the prefix's token ids (``randint(0, vocab_size, size=prefix_len)``), every
  input length from ``[int(L' r), L']`` (``L'`` is the flag less the chat template's
  tokens), every output length from ``[int(O r), O]``, then one vocabulary offset per prompt;
  ``--random-range-ratio 0.8`` spans 0.8 L to L;
* send times (``get_request``): the first request at 0, then after each request a gap of
  ``np.random.gamma(shape=burstiness, scale=1 / (request_rate * burstiness))`` from the same
  generator, not rescaled.

A real tokenizer may move a prompt by a few tokens when the client decodes and re-encodes it;
those moves need the tokenizer and are not reproduced.
"""

from __future__ import annotations

import math

import numpy as np

from servesim_benchclient.config import BenchClientConfig


def lengths(cfg: BenchClientConfig) -> tuple[list[int], list[int]]:
    """(server-side prompt lengths, output lengths), one per prompt, in send order."""
    if cfg.client == "vllm":
        return _vllm_lengths(cfg)
    return _inferencemax_lengths(cfg)[:2]


def send_times_ms(cfg: BenchClientConfig) -> list[float]:
    """When each prompt is sent, ms from the client's start."""
    n = cfg.num_prompts
    if cfg.client == "vllm":
        return [s * 1000.0 for s in _vllm_delays(cfg.request_rate, cfg.burstiness, n, cfg.seed)]
    rs = _inferencemax_lengths(cfg)[2]
    out = []
    t = 0.0
    theta = 1.0 / (cfg.request_rate * cfg.burstiness)
    for _ in range(n):
        out.append(t * 1000.0)
        if not math.isinf(cfg.request_rate):
            t += float(rs.gamma(shape=cfg.burstiness, scale=theta))
    return out


def _vllm_lengths(cfg: BenchClientConfig) -> tuple[list[int], list[int]]:
    ri, ro = cfg.input_range_ratio, cfg.output_range_ratio
    real = max(0, cfg.random_input_len - cfg.special_tokens)
    in_lo = math.floor(real * (1 - ri))
    in_hi = math.ceil(real * (1 + ri))
    out_lo = max(math.floor(cfg.random_output_len * (1 - ro)), 1)
    out_hi = max(math.ceil(cfg.random_output_len * (1 + ro)), 1)
    if cfg.random_prefix_len + in_lo < 1:
        from servesim.errors import ConfigError

        raise ConfigError("the shortest prompt the client can draw is empty", path="random_input_len")
    rng = np.random.default_rng(cfg.seed)
    ins = rng.integers(in_lo, in_hi + 1, size=cfg.num_prompts)
    outs = rng.integers(out_lo, out_hi + 1, size=cfg.num_prompts)
    add = cfg.random_prefix_len + cfg.special_tokens
    return [int(x) + add for x in ins], [int(x) for x in outs]


def _vllm_delays(rate: float, burstiness: float, n: int, seed: int) -> list[float]:
    rs = np.random.RandomState(seed)
    delays: list[float] = []
    for _ in range(n):
        if math.isinf(rate):
            delays.append(0.0)
        elif math.isinf(burstiness):
            delays.append(1.0 / rate)
        else:
            theta = 1.0 / (rate * burstiness)
            delays.append(float(rs.gamma(shape=burstiness, scale=theta)))
    for i in range(1, n):
        delays[i] += delays[i - 1]
    if n and delays[-1] != 0:
        factor = (n / rate) / delays[-1]
        delays = [d * factor for d in delays]
    return delays


def _inferencemax_lengths(cfg: BenchClientConfig) -> tuple[list[int], list[int], np.random.RandomState]:
    rs = np.random.RandomState(cfg.seed)
    n = cfg.num_prompts
    if cfg.random_prefix_len:
        rs.randint(0, cfg.vocab_size, size=cfg.random_prefix_len)
    r = cfg.input_range_ratio
    in_len = cfg.random_input_len - cfg.chat_template_tokens
    ins = rs.randint(int(in_len * r), in_len + 1, size=n).tolist()
    out_len = cfg.random_output_len
    outs = rs.randint(int(out_len * r), out_len + 1, size=n).tolist()
    if cfg.vocab_size is not None:
        rs.randint(0, cfg.vocab_size, size=n)  # the per-prompt vocabulary offsets
    add = cfg.random_prefix_len + cfg.chat_template_tokens
    return [int(x) + add for x in ins], [int(x) for x in outs], rs
