"""The report's per-class section (``classes``, present only with ``workload.classes``).

Per SLO class, over its reported requests: ``submitted`` (arrived), ``completed``, ``failed``
(the engine rejected them), ``rejected`` (the admission policy turned them away) with
``rejected_by`` reason, ``cut_off`` (in flight when the replay stopped), so that
``completed + failed + rejected + cut_off = submitted``; the TTFT, TPOT and E2E latency
distributions of its completed requests (definitions as the main report's); and with an SLA
(the class's own, else the report's), ``goodput_completed`` (completed requests meeting every
set SLA), ``request_goodput`` (those per second of the report's ``duration``) and
``sla_attainment`` (``goodput_completed / submitted``: a refused, failed or cut-off request
misses its SLA).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from servesim.config.sections import ReportConfig
from servesim.config.workload_scope import SloClassConfig
from servesim.report.stats import RequestLog, distribution


def _slas(c: SloClassConfig, cfg: ReportConfig) -> dict[str, float]:
    out = {"ttft_ms": c.sla_ttft_ms if c.sla_ttft_ms is not None else cfg.sla_ttft_ms,
           "tpot_ms": c.sla_tpot_ms if c.sla_tpot_ms is not None else cfg.sla_tpot_ms,
           "e2el_ms": c.sla_e2e_ms if c.sla_e2e_ms is not None else cfg.sla_e2e_ms}
    return {k: v for k, v in out.items() if v is not None}


def _good(log: RequestLog, i: int, sla: Mapping[str, float]) -> bool:
    """The main report's goodput test (servesim.report.summary): a request without tokens is
    judged by its completion time; TPOT only with two tokens or more."""
    n = log.ntok[i]
    ttft = (log.first[i] if n >= 1 else log.done[i]) - log.arrival[i]
    e2e = (log.last[i] if n >= 1 else log.done[i]) - log.arrival[i]
    if "ttft_ms" in sla and not ttft <= sla["ttft_ms"]:
        return False
    if "e2el_ms" in sla and not e2e <= sla["e2el_ms"]:
        return False
    return not ("tpot_ms" in sla and n >= 2 and not (e2e - ttft) / (n - 1) <= sla["tpot_ms"])


def class_section(log: RequestLog, class_of: Sequence[int], classes: Sequence[SloClassConfig],
                  refused: Mapping[int, str], cfg: ReportConfig, duration_s: float) -> dict[str, Any]:
    """Per class name, its figures (see the module docstring). ``class_of`` and ``refused``
    (reason by request) are indexed by the log's request ids."""
    pcts = list(cfg.percentiles)
    out: dict[str, Any] = {}
    dur = max(duration_s, 1e-9)
    for k, c in enumerate(classes):
        ids = [i for i in range(log.n) if class_of[i] == k]
        done = [i for i in ids if log.done[i] >= 0.0 and not log.rejected[i]]
        by_reason: dict[str, int] = {}
        for i in ids:
            if i in refused:
                by_reason[refused[i]] = by_reason.get(refused[i], 0) + 1
        rejected = sum(by_reason.values())
        failed = sum(1 for i in ids if log.rejected[i]) - rejected
        has = [i for i in done if log.ntok[i] >= 1]
        multi = [i for i in has if log.ntok[i] >= 2]
        rec: dict[str, Any] = {
            "submitted": len(ids), "completed": len(done), "failed": failed,
            "rejected": rejected, "rejected_by": dict(sorted(by_reason.items())),
            "cut_off": len(ids) - len(done) - failed - rejected,
            "priority": c.priority,
        }
        rec.update(distribution("ttft", [log.first[i] - log.arrival[i] for i in has], pcts))
        rec.update(distribution("tpot", [(log.last[i] - log.first[i]) / (log.ntok[i] - 1)
                                         for i in multi], pcts))
        rec.update(distribution("e2el", [log.last[i] - log.arrival[i] for i in has], pcts))
        sla = _slas(c, cfg)
        if sla:
            good = sum(1 for i in done if _good(log, i, sla))
            rec.update({"sla": sla, "goodput_completed": good, "request_goodput": good / dur,
                        "sla_attainment": good / len(ids) if ids else 0.0})
        else:
            rec.update({"sla": None, "goodput_completed": None, "request_goodput": None,
                        "sla_attainment": None})
        out[c.name] = rec
    return out


__all__ = ["class_section"]
