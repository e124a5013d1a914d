"""The forward-pass-metrics schema shared by files and streams.

One object per pass, nested as Dynamo's ``ForwardPassMetrics`` msgspec struct (ai-dynamo 1.6.1,
``dynamo/common/forward_pass_metrics.py``, FPM_VERSION 1; ecosystem.md §5), with every field
present and in its declaration order::

    {"version": 1, "worker_id": "0", "dp_rank": 0, "counter_id": 7, "wall_time": 0.0123,
     "scheduled_requests": {"num_prefill_requests", "sum_prefill_tokens",
                            "var_prefill_length", "sum_prefill_kv_tokens",
                            "num_decode_requests", "sum_decode_kv_tokens",
                            "var_decode_kv_tokens"},
     "queued_requests": {"num_prefill_requests", "sum_prefill_tokens", "var_prefill_length",
                         "num_decode_requests", "sum_decode_kv_tokens",
                         "var_decode_kv_tokens"}}

``worker_id`` is the worker's index as a string (Dynamo's field is a string), ``wall_time`` the
simulated pass length in seconds, and variances are floats (msgpack encodes ``0`` and ``0.0``
differently, and Dynamo's struct declares them float). A pass of all zeros with ``wall_time``
0.0 is the idle heartbeat. The JSONL sink writes this object with ``at_ms`` (the simulated end
of the pass) appended; the ZMQ sink sends it without.
"""

from __future__ import annotations

from typing import Any

from servesim.contract import ForwardPassMetrics

FPM_VERSION = 1

#: (wire name, ForwardPassMetrics attribute, float?) of ``scheduled_requests``.
SCHEDULED_FIELDS: tuple[tuple[str, str, bool], ...] = (
    ("num_prefill_requests", "num_prefill_requests", False),
    ("sum_prefill_tokens", "sum_prefill_tokens", False),
    ("var_prefill_length", "var_prefill_length", True),
    ("sum_prefill_kv_tokens", "sum_prefill_kv_tokens", False),
    ("num_decode_requests", "num_decode_requests", False),
    ("sum_decode_kv_tokens", "sum_decode_kv_tokens", False),
    ("var_decode_kv_tokens", "var_decode_kv_tokens", True),
)
#: The same for ``queued_requests`` (waiting prefills; preempted requests back in the queue).
QUEUED_FIELDS: tuple[tuple[str, str, bool], ...] = (
    ("num_prefill_requests", "num_queued_prefill", False),
    ("sum_prefill_tokens", "sum_queued_prefill_tokens", False),
    ("var_prefill_length", "var_queued_prefill_length", True),
    ("num_decode_requests", "num_queued_decode", False),
    ("sum_decode_kv_tokens", "sum_queued_decode_kv_tokens", False),
    ("var_decode_kv_tokens", "var_queued_decode_kv_tokens", True),
)


def _group(m: ForwardPassMetrics, fields: tuple[tuple[str, str, bool], ...]) -> dict[str, Any]:
    return {wire: (float if is_float else int)(getattr(m, attr)) for wire, attr, is_float in fields}


def fpm_object(worker_id: int, m: ForwardPassMetrics) -> dict[str, Any]:
    """The wire object of one pass of worker ``worker_id`` (see the module docs)."""
    return {
        "version": FPM_VERSION,
        "worker_id": str(worker_id),
        "dp_rank": int(m.dp_rank),
        "counter_id": int(m.counter_id),
        "wall_time": float(m.duration_ms) / 1000.0,
        "scheduled_requests": _group(m, SCHEDULED_FIELDS),
        "queued_requests": _group(m, QUEUED_FIELDS),
    }


def heartbeat(worker_id: int, dp_rank: int, counter_id: int) -> ForwardPassMetrics:
    """The all-zero pass a rank reports when it goes idle (Dynamo's active-to-idle beat)."""
    return ForwardPassMetrics(worker_id=worker_id, dp_rank=dp_rank, counter_id=counter_id)


__all__ = ["FPM_VERSION", "QUEUED_FIELDS", "SCHEDULED_FIELDS", "fpm_object", "heartbeat"]
