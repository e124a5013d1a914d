"""Range checks on structured config sections, each problem naming its key path.

Types are checked by the converter; these rules check values (``num_gpu_blocks >= 1``,
finite non-negative speed-up ratios ...). A rule whose field a section no longer has is
skipped, so the section owners can reshape their classes without breaking loading.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

from servesim.config.converter import Problem, show
from servesim.config.lora_checks import check_lora
from servesim.config.warm_cache import check_warm_cache
from servesim.config.workload_scope import check_workload_scope
from servesim.mechanics.numeric import normalize_conditional_accept_rates

Predicate = Callable[[Any], bool]


def _int_ge(n: int) -> Predicate:
    return lambda v: isinstance(v, int) and v >= n


def _finite_ge(x: float) -> Predicate:
    return lambda v: isinstance(v, (int, float)) and math.isfinite(v) and v >= x


def _finite_gt(x: float) -> Predicate:
    return lambda v: isinstance(v, (int, float)) and math.isfinite(v) and v > x


def _unit(v: Any) -> bool:
    return isinstance(v, (int, float)) and 0.0 <= v <= 1.0


# (field, predicate, expectation, null allowed)
Rule = tuple[str, Predicate, str, bool]

ENGINE_RULES: tuple[Rule, ...] = (
    # 2^24 blocks per rank is more KV than any GPU holds, even at one token per block; past
    # it the pool's own bookkeeping exhausts memory before the first pass (1e9: ~80 GB).
    ("num_gpu_blocks", lambda v: isinstance(v, int) and 1 <= v <= 1 << 24,
     "an integer in [1, 16777216]", False),
    ("block_size", _int_ge(1), "an integer >= 1, or null for the backend's default", True),
    ("max_model_len", _int_ge(1), "an integer >= 1 or null", True),
    ("max_num_seqs", _int_ge(1), "an integer >= 1 or null", True),
    ("max_num_batched_tokens", _int_ge(1), "an integer >= 1 or null", True),
    ("speedup_ratio", _finite_ge(0), "a finite number >= 0", False),
    ("decode_speedup_ratio", _finite_ge(0), "a finite number >= 0", False),
    ("dp_size", _int_ge(1), "an integer >= 1", False),
    ("prefill_schedule_interval", _int_ge(1), "an integer >= 1", False),
    ("kv_bytes_per_token", _finite_gt(0), "a finite number > 0 or null", True),
    # Below 1 kB/s a prompt's transfer time overflows the report's statistics (1e300 ms).
    ("kv_transfer_bandwidth", _finite_ge(1e-6), "a finite number >= 1e-6 (GB/s) or null", True),
    # dynamo-mocker.md §1.5 rule 8
    ("aic_nextn", lambda v: isinstance(v, int) and 1 <= v <= 5, "an integer in [1, 5] or null", True),
    # random.Random seeds with abs(seed): a negative seed would repeat a positive one's draws
    ("aic_mtp_seed", _int_ge(0), "an integer >= 0", False),
    ("num_layers", _int_ge(1), "an integer >= 1 or null", True),
    ("num_kv_heads", _int_ge(1), "an integer >= 1 or null", True),
    ("head_dim", _int_ge(1), "an integer >= 1 or null", True),
    ("kv_dtype_bytes", _finite_gt(0), "a finite number > 0", False),
    ("backend", lambda v: bool(v), "a backend name", False),
    ("eviction_policy", lambda v: bool(v), "an eviction policy name or {type: NAME, ...}", False),
)

# aisimulate-engine.md §5.4; bandwidth 0 means instantaneous.
HOST_OFFLOAD_RULES: tuple[Rule, ...] = (
    ("num_host_blocks", _int_ge(1), "an integer >= 1", False),
    ("d2h_bandwidth_gbps", _finite_ge(0), "a finite number >= 0 (GB/s; 0 is instantaneous)", False),
    ("h2d_bandwidth_gbps", _finite_ge(0), "a finite number >= 0 (GB/s; 0 is instantaneous)", False),
    ("latency_to_first_byte_ms", _finite_ge(0), "a finite number >= 0", False),
)

CLUSTER_RULES: tuple[Rule, ...] = (
    ("workers", _int_ge(0), "an integer >= 0", False),
    ("prefill_workers", _int_ge(0), "an integer >= 0", False),
    ("decode_workers", _int_ge(0), "an integer >= 0", False),
    ("handoff_latency_ms", _finite_ge(0), "a finite number >= 0", False),
)

WORKLOAD_RULES: tuple[Rule, ...] = (
    ("concurrency", _int_ge(1), "an integer >= 1 or null", True),
    ("max_concurrency", _int_ge(1), "an integer >= 1 or null", True),
    # Below 1e-6 a trace's millisecond timestamps overflow the simulated clock.
    ("arrival_speedup_ratio", _finite_ge(1e-6), "a finite number >= 1e-6", False),
    # numpy's generator refuses a negative seed with a bare ValueError; say so up front.
    ("seed", _int_ge(0), "an integer >= 0", False),
)

TRACE_RULES: tuple[Rule, ...] = (("trace_block_size", _int_ge(1), "an integer >= 1", False),)

# Bounds agree with the generator's own checks (servesim.workload.synthetic), so that
# ``servesim validate`` accepts exactly what ``servesim run`` can generate.
SYNTHETIC_RULES: tuple[Rule, ...] = (
    # past 1e8 the generator's arrays alone exhaust memory; a larger count is a typo
    ("num_requests", lambda v: isinstance(v, int) and 0 <= v <= 10**8, "an integer in [0, 100000000]", False),
    ("rate", _finite_ge(0), "a finite number >= 0 (sessions per second; 0 is a burst)", False),
    ("arrival", lambda v: v in ("poisson", "constant", "burst"), "one of poisson, constant, burst", False),
    (
        "prefix_groups",
        lambda v: isinstance(v, int) and 0 <= v < (1 << 17),
        "an integer in [0, 131072)",
        False,
    ),
    ("prefix_ratio", _unit, "a number in [0, 1]", False),
    ("turns_per_session", _int_ge(1), "an integer >= 1", False),
    ("inter_turn_delay_ms", _finite_ge(0), "a finite number >= 0", False),
    ("block_size", _int_ge(1), "an integer >= 1", False),
    ("lora_adapters", lambda v: isinstance(v, int) and 0 <= v <= 1 << 16, "an integer in [0, 65536]",
     False),
    ("lora_fraction", _unit, "a number in [0, 1]", False),
)

REPORT_RULES: tuple[Rule, ...] = (
    ("sla_ttft_ms", _finite_gt(0), "a finite number > 0 or null", True),
    ("sla_tpot_ms", _finite_gt(0), "a finite number > 0 or null", True),
    ("sla_e2e_ms", _finite_gt(0), "a finite number > 0 or null", True),
)


def apply_rules(obj: Any, prefix: str, rules: tuple[Rule, ...]) -> list[Problem]:
    out: list[Problem] = []
    for name, ok, expected, nullable in rules:
        if not hasattr(obj, name):
            continue
        value = getattr(obj, name)
        if value is None and nullable:
            continue
        if not ok(value):
            out.append((f"{prefix}.{name}", f"expected {expected}, got {show(value)}"))
    return out


def check_engine(engine: Any, prefix: str = "engine") -> list[Problem]:
    problems = apply_rules(engine, prefix, ENGINE_RULES)
    nextn = getattr(engine, "aic_nextn", None)
    if isinstance(nextn, int) and 1 <= nextn <= 5:
        try:
            normalize_conditional_accept_rates(nextn, engine.aic_nextn_accept_rates)
        except ValueError as exc:
            problems.append((f"{prefix}.aic_nextn_accept_rates", str(exc)))
        # dynamo-mocker.md §1.5 rule 4: speculative steps are priced by the draft model, not
        # by a decode speed-up.
        ratio = getattr(engine, "decode_speedup_ratio", 1.0)
        if ratio != 1.0:
            problems.append(
                (f"{prefix}.decode_speedup_ratio", f"expected 1.0 when aic_nextn is set, got {show(ratio)}")
            )
    elif nextn is None and getattr(engine, "aic_nextn_accept_rates", None) is not None:
        # rule 5: rates without a draft count would be silently ignored
        problems.append((f"{prefix}.aic_nextn_accept_rates", "set without aic_nextn; set both or neither"))
    host = getattr(engine, "native_host_offload", None)
    if host is not None:
        problems += apply_rules(host, f"{prefix}.native_host_offload", HOST_OFFLOAD_RULES)
    problems += check_lora(engine, prefix)
    return problems


def check_sections(cluster: Any, workload: Any, report: Any) -> list[Problem]:
    """Range problems of the cluster, workload and report sections."""
    problems = apply_rules(cluster, "cluster", CLUSTER_RULES)
    problems += _check_worker_counts(cluster)
    problems += apply_rules(workload, "workload", WORKLOAD_RULES)
    trace = getattr(workload, "trace", None)
    synthetic = getattr(workload, "synthetic", None)
    if trace is not None:
        problems += apply_rules(trace, "workload.trace", TRACE_RULES)
    if synthetic is not None:
        problems += apply_rules(synthetic, "workload.synthetic", SYNTHETIC_RULES)
        problems += _check_length_specs(synthetic)
    if trace is not None and synthetic is not None:
        problems.append(("workload", "expected either 'trace' or 'synthetic', got both"))
    problems += check_workload_scope(workload)
    problems += check_warm_cache(getattr(workload, "warm_cache", None))
    problems += apply_rules(report, "report", REPORT_RULES)
    for i, p in enumerate(getattr(report, "percentiles", ())):
        if not (math.isfinite(p) and 0.0 <= p <= 100.0):
            problems.append((f"report.percentiles[{i}]", f"expected a number in [0, 100], got {show(p)}"))
    return problems


def _check_worker_counts(cluster: Any) -> list[Problem]:
    workers = getattr(cluster, "workers", 1)
    prefill = getattr(cluster, "prefill_workers", 0)
    decode = getattr(cluster, "decode_workers", 0)
    if not all(isinstance(n, int) and n >= 0 for n in (workers, prefill, decode)):
        return []  # already reported by the rules
    if (prefill > 0) != (decode > 0):
        return [
            (
                "cluster.prefill_workers" if prefill == 0 else "cluster.decode_workers",
                f"a prefill/decode split needs both prefill_workers and decode_workers >= 1, "
                f"got prefill_workers={prefill}, decode_workers={decode}",
            )
        ]
    if workers + prefill + decode < 1:
        return [("cluster.workers", "expected at least one worker in the cluster, got 0")]
    return []


def _check_length_specs(synthetic: Any) -> list[Problem]:
    """Length specs (``uniform:512:2048`` ...) parse as the generator will parse them."""
    from servesim.errors import ConfigError
    from servesim.workload.synthetic import parse_length_spec

    out: list[Problem] = []
    for name, minimum in (("input_length", 1), ("output_length", 0)):
        key = f"workload.synthetic.{name}"
        spec = getattr(synthetic, name, None)
        if spec is None:
            continue
        try:
            parse_length_spec(spec, key, minimum)
        except ConfigError as exc:
            message = str(exc)
            out.append((key, message[len(key) + 2 :] if message.startswith(key + ": ") else message))
    return out
