"""The ``bench_client`` trace format: a benchmark client's options file becomes its load.

``workload.trace.path`` names a YAML file of the client's options
(:mod:`servesim_benchclient.config`). Each prompt is one single-turn session, in the order
the client sends them, starting at its send time. Prompts share the client's fixed random
prefix (whole ``trace_block_size`` blocks of it) and nothing else, as random token ids do.

With ``max_concurrency`` the client keeps that many requests in flight: set
``workload.max_concurrency`` to the same number (each request waits for a slot from its send
time, as the client's semaphore makes it; with ``request_rate: inf`` ``workload.concurrency``,
the closed loop, is the same load). The replay refuses any other number.

``num_warmups``: both clients first send that many copies of the first prompt (with its output
length), under the same concurrency limit, and wait for every one before the timed run
(``benchmark`` in ``vllm/benchmarks/serve.py`` and in InferenceX
``utils/bench_serving/benchmark_serving.py``). They are sessions ``warmup_0`` ... ahead of the
timed ones, all due at the start, and the replay must leave them out of the report and hold the
timed requests until they end: ``workload.warmup: {requests: num_warmups, wait: true}``, which
the replay requires (servesim.replay.runner). The timed requests' send times then count from
the warmup's end.
"""

from __future__ import annotations

import os
from typing import Any

from servesim.errors import ConfigError
from servesim.workload.model import Session, Turn, Workload, make_workload
from servesim.tokens import RepeatedBlockTokens

from servesim_benchclient import config as config_mod
from servesim_benchclient import draws

_UNIQUE_BASE = 1 << 28


def load_config(path: str) -> config_mod.BenchClientConfig:
    """The validated client options in ``path`` (a ConfigError names the file and key)."""
    import yaml

    if not os.path.isfile(path):
        raise ConfigError(f"no such client options file {path!r}", path="workload.trace.path")
    try:
        with open(path, encoding="utf-8") as fh:
            raw = yaml.safe_load(fh)
    except (OSError, UnicodeDecodeError, yaml.YAMLError) as exc:
        first = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
        raise ConfigError(f"cannot read client options: {first}", source=path) from None
    return config_mod.build(raw, path)


def build_workload(cfg: config_mod.BenchClientConfig, block_size: int, source: str = "<bench_client>") -> Workload:
    """The client's load as a workload of single-turn sessions, its warm-ups first."""
    ins, outs = draws.lengths(cfg)
    times = draws.send_times_ms(cfg)
    shared = list(range(cfg.random_prefix_len // block_size))
    next_id = _UNIQUE_BASE
    warm = cfg.num_warmups  # the warm-ups take request ids 0 .. warm - 1
    sessions = []
    for i, (n_in, n_out, t) in enumerate(zip(ins, outs, times, strict=True)):
        blocks = -(-n_in // block_size)
        own = blocks - len(shared)
        ids = shared + list(range(next_id, next_id + own))
        next_id += own
        session = Session(f"request_{i}", t)
        session.turns.append(Turn(warm + i, RepeatedBlockTokens(ids, block_size, n_in), n_out))
        sessions.append(session)
    first = sessions[0].turns[0]
    warmups = []
    for k in range(warm):
        session = Session(f"warmup_{k}", 0.0)
        prompt = RepeatedBlockTokens(list(first.prompt.hash_ids), block_size, first.input_length)
        session.turns.append(Turn(k, prompt, first.output_length))
        warmups.append(session)
    return make_workload(warmups + sessions, source, client_concurrency=cfg.max_concurrency,
                         client_warmups=warm)


class BenchClientFormat:
    """``workload.trace: {format: bench_client, path: client.yaml}``."""

    @classmethod
    def read(cls, path: str, *, trace_block_size: int, options: dict[str, Any] | None = None) -> Workload:
        return build_workload(load_config(path), trace_block_size, path)
