"""aiconfigurator's own estimate of a silicon row (the peer servesim is compared with).

Uses the ``aiconfigurator`` 0.12.0 package's Python API (``aiconfigurator.cli.api.cli_estimate``,
the programmatic form of ``aiconfigurator cli estimate``) with the row's deployment, its
nominal ISL/OSL, the sample's own ``batch_size`` (the client's concurrency, per
attention-DP rank) and ``ctx_tokens`` = the servers'
8,192 batched tokens, on the same data version servesim's ``aic`` model reads (the system's
``current`` slot). Returns None when the package is not installed.
"""

from __future__ import annotations

import contextlib
import io
import logging
import math
from typing import Any

from silicon_rows import MAX_BATCHED_TOKENS, Row, kv_fp8


def available() -> bool:
    try:
        import aiconfigurator.cli.api  # noqa: F401
    except ImportError:
        return False
    return True


def estimate(row: Row, version: str) -> tuple[float, float] | str:
    """(mean TTFT ms, mean TPOT ms), or the reason there is none."""
    from aiconfigurator.cli.api import cli_estimate

    kw: dict[str, Any] = {
        "mode": row.mode, "backend_name": row.backend, "backend_version": version, "isl": row.isl,
        "osl": row.osl, "gemm_quant_mode": row.gemm, "moe_quant_mode": row.moe,
        "ctx_tokens": MAX_BATCHED_TOKENS,
        "kvcache_quant_mode": "fp8" if kv_fp8(row) else None,
    }
    if row.mode == "agg":
        r = row.roles["agg"]
        kw.update(batch_size=row.batch_size or row.concurrency, tp_size=r.tp, pp_size=r.pp, attention_dp_size=r.attention_dp,
                  moe_tp_size=r.moe_tp, moe_ep_size=r.moe_ep)
    else:
        p, d = row.roles["prefill"], row.roles["decode"]
        kw.update(prefill_tp_size=p.tp, prefill_pp_size=p.pp, prefill_attention_dp_size=p.attention_dp,
                  prefill_moe_tp_size=p.moe_tp, prefill_moe_ep_size=p.moe_ep, prefill_num_workers=p.workers,
                  prefill_batch_size=1,
                  decode_tp_size=d.tp, decode_pp_size=d.pp, decode_attention_dp_size=d.attention_dp,
                  decode_moe_tp_size=d.moe_tp, decode_moe_ep_size=d.moe_ep, decode_num_workers=d.workers,
                  decode_batch_size=max(1, row.concurrency // max(1, d.workers)))
    logging.disable(logging.WARNING)
    try:
        with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):
            res = cli_estimate(row.model, row.system, **kw)
    except Exception as exc:  # the peer's own refusal is a result to report, not a crash
        return f"{type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}"[:160]
    finally:
        logging.disable(logging.NOTSET)
    ttft, tpot = float(res.ttft), float(res.tpot)
    if not (math.isfinite(ttft) and math.isfinite(tpot)):
        return "non-finite estimate"
    return ttft, tpot
