"""Generated blocks hashed lazily (VllmRequest.finalize_seq) against eager hashing.

With KV events off, blocks holding pseudo generated tokens are registered under placeholders
and get their real hashes only when the request is preempted (its own readmission is the only
lookup that could hit them). Turning KV events on forces eager hashing; everything else —
token times, completions, cached tokens, metrics, forward-pass metrics, preemptions — must be
identical, on randomised workloads with tight pools (preemption and readmission).
"""

from __future__ import annotations

from hypothesis import HealthCheck, given, settings
from servesim.contract import Request
from servesim.testing.driver import DriveResult, drive
from servesim.timing import PolynomialTiming
from servesim.tokens import Tokens
from test_runs import workloads
from vllm_helpers import make_engine


def _drive(cfg: dict, arrivals: list, cancels: list, events: bool, runs: bool) -> DriveResult:
    cfg = {k: v for k, v in cfg.items() if k != "emit_kv_token_ids"}
    engine = make_engine(PolynomialTiming(), emit_kv_events=events,
                         emit_forward_pass_metrics=True, **cfg)
    return drive(engine, arrivals, extra_commands=cancels, runs=runs, through_completions=runs)


def _observed(res: DriveResult) -> tuple:
    reqs = {rid: (t.token_times, t.completed_ms, t.rejected, t.cached_tokens)
            for rid, t in res.requests.items()}
    passes = [(c.pass_id, c.by_rank[0].effects.outputs.token_request_ids,
               c.by_rank[0].effects.metrics, c.by_rank[0].effects.forward_pass_metrics)
              for c in res.completions]
    starts = [(p.pass_id, p.by_rank[0].effects.admissions, p.by_rank[0].effects.pressure_events)
              for p in res.passes]
    return reqs, passes, starts, res.end_ms


@settings(max_examples=120, derandomize=True, deadline=None,
          suppress_health_check=[HealthCheck.too_slow])
@given(workloads())
def test_lazy_generated_hashes_change_nothing(case: tuple[dict, list, list]) -> None:
    cfg, arrivals, cancels = case
    for runs in (False, True):
        eager = _drive(cfg, arrivals, cancels, events=True, runs=runs)
        lazy = _drive(cfg, arrivals, cancels, events=False, runs=runs)
        assert _observed(eager) == _observed(lazy)


def test_preempted_request_hits_its_own_generated_blocks_on_readmission() -> None:
    """A tight pool: the newest request is preempted after generating full blocks; on
    readmission it must find them cached (real hashes swapped in at preemption), exactly as
    with eager hashing."""
    arrivals = [(0.0, Request(0, Tokens(list(range(6))), 20)),
                (0.0, Request(1, Tokens(list(range(100, 106))), 20))]
    cfg = dict(num_gpu_blocks=13, block_size=4)
    out = {}
    for events in (True, False):
        engine = make_engine(PolynomialTiming(), emit_kv_events=events, **cfg)
        res = drive(engine, arrivals)
        hits = [(a.request_id, a.reused_input_tokens)
                for p in res.passes for a in p.by_rank[0].effects.admissions]
        preempted = [e.request_id for p in res.passes for e in p.by_rank[0].effects.pressure_events]
        out[events] = (hits, preempted, {r: t.token_times for r, t in res.requests.items()})
    assert out[True] == out[False]
    hits, preempted, _ = out[False]
    # Request 1 is preempted, then readmitted reusing 24 tokens: its 6 prompt tokens' first
    # block and five blocks that hold generated tokens.
    assert preempted == [1] and hits == [(0, 0), (1, 0), (1, 24)]
