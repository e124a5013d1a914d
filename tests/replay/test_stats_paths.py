"""The report's list path (short replays, no numpy) and its numpy path (large ones) agree bit
for bit: numpy's pairwise summation, the distributions, the weighted statistics and whole
reports of real replays."""

from __future__ import annotations

import json
import math
import random
import subprocess
import sys

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from servesim.config.loader import load_config
from servesim.config.sections import ReportConfig
from servesim.replay.runner import simulate
from servesim.report.pairwise import pairwise_sum
from servesim.report.stats import (
    RequestLog,
    distribution,
    sorted_weighted_distribution,
    weighted_sorted,
)
from servesim.report.stats_arrays import (
    distribution_array,
    sorted_weighted_distribution_array,
    weighted_sorted_array,
)
from servesim.report.summary import list_samples, report_from_samples
from servesim.report.summary_arrays import report_samples

PCTS = [1.0, 25.0, 50.0, 90.0, 99.0, 99.9]


def _same(a: float, b: float) -> bool:
    return a == b and math.copysign(1.0, a) == math.copysign(1.0, b)


def _samples(rng: random.Random, n: int, kind: int) -> list[float]:
    if kind == 0:
        return [rng.expovariate(0.01) for _ in range(n)]
    if kind == 1:
        return [rng.uniform(-1e6, 1e6) * 10.0 ** rng.randint(-8, 8) for _ in range(n)]
    return [round(rng.lognormvariate(3, 2), rng.randint(0, 9)) for _ in range(n)]


@pytest.mark.parametrize("kind", [0, 1, 2])
def test_pairwise_sum_is_numpys_sum(kind: int) -> None:
    rng = random.Random(kind)
    sizes = [*range(0, 300), 511, 1000, 1023, 4097, 8191, 8192, 8193, 16385, 100_003]
    for n in sizes:
        values = _samples(rng, n, kind)
        assert _same(pairwise_sum(values), float(np.asarray(values, dtype=np.float64).sum())), n


def test_pairwise_sum_signed_zeros() -> None:
    for values in ([], [-0.0], [-0.0] * 9, [-0.0] * 200, [0.0, -0.0]):
        assert _same(pairwise_sum(values), float(np.asarray(values, dtype=np.float64).sum()))


@settings(max_examples=300, derandomize=True, deadline=None)
@given(st.lists(st.floats(min_value=-1e12, max_value=1e12, allow_nan=False), max_size=300))
def test_distribution_paths_agree(values: list[float]) -> None:
    assert distribution("x", values, PCTS) == distribution_array("x", np.asarray(values), PCTS)


@pytest.mark.parametrize("n", [0, 1, 7, 8, 129, 4000, 20_001])
def test_distribution_paths_agree_on_sizes(n: int) -> None:
    values = _samples(random.Random(n), n, 2)
    want = distribution_array("x", np.asarray(values), PCTS)
    assert distribution("x", values, PCTS) == want
    assert distribution("x", np.asarray(values), PCTS) == want  # arrays are accepted


@settings(max_examples=300, derandomize=True, deadline=None)
@given(st.lists(st.tuples(st.sampled_from([0.0, 1e-6, 0.5, 1.25, 5.740003, 13.0, 40.0,
                                            1234.567891]),
                          st.integers(0, 1000)), max_size=60))
def test_weighted_paths_agree(pairs: list[tuple[float, int]]) -> None:
    values = [v for v, _ in pairs]
    weights = [w for _, w in pairs]
    uniq, counts = weighted_sorted(values, weights)
    auniq, acounts = weighted_sorted_array(np.asarray(values), np.asarray(weights, dtype=np.int64))
    assert (uniq, counts) == (auniq.tolist(), acounts.tolist())
    assert sorted_weighted_distribution("g", uniq, counts, PCTS) == (
        sorted_weighted_distribution_array("g", auniq, acounts, PCTS))


def _log(rng: random.Random, n: int) -> RequestLog:
    """A log as a replay leaves it: tokens, runs with shared gaps, some requests unfinished
    or rejected."""
    log = RequestLog([rng.randint(1, 5000) for _ in range(n)])
    now = 0.0
    for rid in range(n):
        log.arrival[rid] = now
        now += rng.choice([0.0, 1.5, 7.25, 40.0])
    alive = list(range(n))
    t = 10.0
    while alive:
        t += rng.choice([3.000001, 12.5, 20.0, 45.123456])
        batch = [r for r in alive if log.arrival[r] <= t]
        if not batch:
            continue
        if rng.random() < 0.3 and all(log.ntok[r] > 1 for r in batch):
            ends = [t + 5.0 * k for k in range(1, rng.randint(2, 6))]
            log.run_tokens(batch, [], ends, start=log.last[batch[0]]
                           if len({log.last[r] for r in batch}) == 1 else None)
            t = ends[-1]
        else:
            log.tokens(batch, t)
        for r in list(batch):
            if log.ntok[r] >= rng.randint(1, 30):
                alive.remove(r)
                log.done[r] = log.last[r] if rng.random() < 0.9 else -1.0
                log.rejected[r] = rng.random() < 0.05
                log.admission(r, rng.randint(0, 100), t)
    return log


@pytest.mark.parametrize("seed", range(12))
def test_report_paths_agree_on_logs(seed: int) -> None:
    rng = random.Random(seed)
    log = _log(rng, rng.randint(0, 60))
    cfg = ReportConfig(sla_ttft_ms=rng.choice([None, 50.0]), sla_tpot_ms=rng.choice([None, 9.0]),
                       sla_e2e_ms=rng.choice([None, 400.0]))
    slas = {"ttft_ms": cfg.sla_ttft_ms, "tpot_ms": cfg.sla_tpot_ms, "e2el_ms": cfg.sla_e2e_ms}
    any_sla = any(v is not None for v in slas.values())
    lists = report_from_samples(log, cfg, list_samples(log, cfg, any_sla), slas, None)
    arrays = report_from_samples(log, cfg, report_samples(log, cfg, any_sla), slas, None)
    assert json.dumps(lists, sort_keys=True) == json.dumps(arrays, sort_keys=True)


SCENARIOS = [
    [],  # the built-in default scenario
    ["workload.synthetic.num_requests=300", "report.sla_ttft_ms=300", "report.sla_tpot_ms=30"],
    ["engine.backend=sglang", "workload.synthetic.num_requests=200"],
    ["engine.backend=trtllm", "workload.synthetic.num_requests=200", "cluster.workers=2"],
    ["engine.num_gpu_blocks=64", "workload.synthetic.num_requests=150"],  # preemption
]


@pytest.mark.parametrize("sets", SCENARIOS)
def test_report_paths_agree_on_replays(sets: list[str]) -> None:
    loaded = load_config([], sets)
    result = simulate(loaded)
    log, cfg = result.log, loaded.sim.report
    slas = {"ttft_ms": cfg.sla_ttft_ms, "tpot_ms": cfg.sla_tpot_ms, "e2el_ms": cfg.sla_e2e_ms}
    any_sla = any(v is not None for v in slas.values())
    lists = report_from_samples(log, cfg, list_samples(log, cfg, any_sla), slas, None)
    arrays = report_from_samples(log, cfg, report_samples(log, cfg, any_sla), slas, None)
    assert lists["completed"] > 0
    assert json.dumps(lists, sort_keys=True) == json.dumps(arrays, sort_keys=True)


def test_a_short_trace_replay_imports_no_numpy(tmp_path) -> None:
    """``servesim run`` on a short Mooncake trace: no numpy (the report, the timing model and
    runs of passes price without it) and no cattrs (its default config is read directly)."""
    trace = tmp_path / "t.jsonl"
    trace.write_text("".join(
        json.dumps({"timestamp": i * 100, "input_length": 300 + 17 * i, "output_length": 20 + i,
                    "hash_ids": [3 * i, 3 * i + 1]}) + "\n" for i in range(10)))
    code = ("import sys\nfrom servesim.cli.main import main\n"
            "rc = main(['run', '--trace', sys.argv[1], '--json'])\n"
            "print('CATTRS' if 'cattrs' in sys.modules else 'NO CATTRS')\n"
            "print('NUMPY' if 'numpy' in sys.modules else 'NO NUMPY')\nsys.exit(rc)\n")
    out = subprocess.run([sys.executable, "-c", code, str(trace)], capture_output=True,
                         text=True, timeout=120, check=True)
    report = json.loads(out.stdout[: out.stdout.rindex("}") + 1])
    assert report["completed"] == 10 and report["total_output_tokens"] == sum(20 + i for i in range(10))
    assert out.stdout.rstrip().endswith("NO CATTRS\nNO NUMPY")


def test_the_path_threshold_waits_for_numpy(monkeypatch) -> None:
    """Before numpy is imported, samples up to LIST_MAX stay on the list path (importing numpy
    costs more than the list path spends on them); once it is, numpy takes over past
    ARRAY_MIN."""
    from servesim.report.stats import ARRAY_MIN, LIST_MAX, in_arrays

    assert ARRAY_MIN < LIST_MAX
    assert in_arrays(ARRAY_MIN + 1) and not in_arrays(ARRAY_MIN)
    monkeypatch.delitem(sys.modules, "numpy")
    assert not in_arrays(ARRAY_MIN + 1) and not in_arrays(LIST_MAX)
    assert in_arrays(LIST_MAX + 1)
