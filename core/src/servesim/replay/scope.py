"""What the report of a replay covers: ``workload.warmup``, ``workload.stop`` (docs/workloads.md).

A :class:`ReportScope` exists only when one of them is configured; without them the runner
never builds one and the replay and its report are exactly as before. With one, every pass is
stepped (no runs of passes: the report keeps each inter-token gap with its request), the
driver stops where ``workload.stop`` says (:attr:`servesim.replay.driver.Replayer.stop_at`),
and the report and per-request output are built from the log narrowed to the *reported*
requests (:func:`servesim.report.subset.subset_log`):

* requests that never arrived (the replay stopped first) are not submitted and not reported;
* warmup requests ran like any other (sinks, the router and the caches saw them) but are left
  out: AIPerf's warmup (docs/tutorials/warmup.md): the first ``requests`` dispatched (in
  dispatch order: time, then session order) or those dispatched before ``duration_s`` after
  the first one, whichever ends first;
* the measured window starts at the first reported request's arrival, so ``duration`` and the
  throughputs cover the requests reported (without a warmup it starts at 0, as before);
* requests in flight when the replay stopped are *cut off*: reported, neither completed nor
  failed, and marked ``cut_off`` in the per-request lines.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from servesim.report.subset import subset_log
from servesim.report.summary import build_report, clean_floats

if TYPE_CHECKING:
    from servesim.config.sections import ReportConfig, WorkloadConfig
    from servesim.replay.driver import Replayer
    from servesim.report.stats import RequestLog


class ReportScope:
    """The warmup and stop of one replay (see the module docstring)."""

    def __init__(self, cfg: WorkloadConfig) -> None:
        self.warmup = cfg.warmup
        self.stop = cfg.stop

    @classmethod
    def of(cls, cfg: WorkloadConfig) -> ReportScope | None:
        """A scope when ``cfg`` sets a warmup or a stop, else None."""
        if cfg.warmup is None and cfg.stop is None:
            return None
        return cls(cfg)

    def attach(self, replayer: Replayer) -> None:
        """Give ``replayer`` the stop conditions."""
        if self.stop is not None:
            replayer.stop_at = self.stop.at_ms
            replayer.stop_after = self.stop.completions or 0

    def warmup_ids(self, log: RequestLog, session_index: Sequence[int]) -> set[int]:
        """The warmup requests: a prefix of the arrived requests in dispatch order."""
        if self.warmup is None:
            return set()
        arrival = log.arrival
        order = sorted((r for r in range(log.n) if arrival[r] >= 0.0),
                       key=lambda r: (arrival[r], session_index[r], r))
        limit = len(order) if self.warmup.requests is None else self.warmup.requests
        ends = None if self.warmup.duration_s is None or not order else \
            arrival[order[0]] + self.warmup.duration_s * 1000.0
        out: set[int] = set()
        for r in order[:limit]:
            if ends is not None and arrival[r] >= ends:
                break
            out.add(r)
        return out

    def narrow(self, replayer: Replayer, log: RequestLog, cfg: ReportConfig,
               resolved: dict[str, Any]) -> tuple[dict[str, Any], RequestLog, list[str]]:
        """The report, the per-request log and the session ids of the reported requests."""
        warm = self.warmup_ids(log, replayer.session_index)
        keep = [r for r in range(log.n) if log.arrival[r] >= 0.0 and r not in warm]
        start = min((log.arrival[r] for r in keep), default=0.0)
        report = build_report(subset_log(log, keep, start), cfg, resolved)
        shown = subset_log(log, keep)
        extra = dict(shown.extra or {})
        extra["request_id"] = list(keep)
        if self.warmup is not None:
            report["warmup"] = clean_floats({"requests": len(warm), "measured_from_ms": start})
        if self.stop is not None:
            cut = [d < 0.0 for d in shown.done]
            extra["cut_off"] = cut
            # a cut-off request has no end-to-end latency, only the tokens it got so far
            extra["e2el_ms"] = [None if c or f < 0.0 else last - a for c, f, last, a in
                                zip(cut, shown.first, shown.last, shown.arrival, strict=True)]
            report["stop"] = clean_floats(self._stop_report(replayer, log, sum(cut)))
        shown.extra = extra
        return report, shown, [replayer.session_of[r] for r in keep]

    def _stop_report(self, replayer: Replayer, log: RequestLog, cut_off: int) -> dict[str, Any]:
        assert self.stop is not None
        if self.stop.completions is not None and replayer.stop_after == 0:
            reason, at = "completions", replayer.stop_at
        elif replayer.stopped:
            reason, at = "max_virtual_time", self.stop.at_ms
        else:
            reason, at = "drained", replayer.now
        return {"reason": reason, "at_ms": at, "cut_off": cut_off,
                "not_arrived": sum(1 for a in log.arrival if a < 0.0)}


def scoped_report(scope: ReportScope | None, replayer: Replayer, log: RequestLog,
                  cfg: ReportConfig, resolved: dict[str, Any]) -> tuple[dict[str, Any], RequestLog, list[str]]:
    """The report, log and session ids a finished replay's result holds: as they are without a
    scope, narrowed with one."""
    if scope is None:
        return build_report(log, cfg, resolved), log, replayer.session_of
    return scope.narrow(replayer, log, cfg, resolved)


__all__ = ["ReportScope", "scoped_report"]
