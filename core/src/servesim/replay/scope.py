"""What the report of a replay covers: ``workload.warmup``, ``workload.stop``,
``workload.classes`` and ``workload.admission`` (docs/workloads.md).

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
  failed, and marked ``cut_off`` in the per-request lines;
* requests the admission policy refused (servesim.replay.admission) count in ``rejected``,
  not in ``failed``: ``completed + failed + rejected (+ cut_off) = num_requests``;
* with SLO classes (servesim.workload.classes) the report gains its ``classes`` section
  (servesim.report.classes) and every per-request line its ``class``.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from servesim.report.summary import build_report, clean_floats

# What a scope needs is imported when one is built (ReportScope.of): a replay without one,
# the common case, does not load the admission policies, the classes or the log subsets.
if TYPE_CHECKING:
    from servesim.config.sections import ReportConfig, WorkloadConfig
    from servesim.plugins import Plugins
    from servesim.replay.admission import AdmissionControl
    from servesim.replay.driver import Replayer
    from servesim.report.stats import RequestLog
    from servesim.workload.model import Workload


class ReportScope:
    """The warmup, stop, classes and admission of one replay (see the module docstring)."""

    def __init__(self, cfg: WorkloadConfig, workload: Workload, plugins: Plugins) -> None:
        from servesim.replay.admission import build_policy
        from servesim.workload.classes import assign_classes

        self.warmup = cfg.warmup
        self.stop = cfg.stop
        self.classes = tuple(cfg.classes)
        self.class_of = (assign_classes(workload, self.classes, cfg.seed) if self.classes
                         else [0] * workload.num_requests)
        self.policy = None if cfg.admission is None else \
            build_policy(cfg.admission, self.classes, plugins.admission_policies())
        self.control: AdmissionControl | None = None

    @classmethod
    def of(cls, cfg: WorkloadConfig, workload: Workload, plugins: Plugins) -> ReportScope | None:
        """A scope when ``cfg`` sets a warmup, a stop, classes or an admission policy, else
        None. Classes are assigned (and their priorities set on the turns) here."""
        if cfg.warmup is None and cfg.stop is None and not cfg.classes and cfg.admission is None:
            return None
        return cls(cfg, workload, plugins)

    def attach(self, replayer: Replayer) -> None:
        """Give ``replayer`` the stop conditions and the admission control."""
        if self.stop is not None:
            replayer.stop_at = self.stop.at_ms
            replayer.stop_after = self.stop.completions or 0
        if self.warmup is not None and self.warmup.wait:
            replayer.warmup_hold = self.warmup.requests
        if self.policy is not None:
            from servesim.replay.admission import AdmissionControl

            names = [c.name for c in self.classes] or ["default"]
            self.control = AdmissionControl(self.policy, self.class_of, names,
                                            replayer.session_of, replayer.log.input_length)
            replayer.admission = self.control

    def warmup_ids(self, log: RequestLog, session_index: Sequence[int],
                   warm_sessions: set[int] | None = None) -> set[int]:
        """The warmup requests: a prefix of the arrived requests in dispatch order, or with
        ``wait`` every request of the sessions that ran before the barrier."""
        if self.warmup is None:
            return set()
        if self.warmup.wait:
            sessions = warm_sessions or set()
            return {r for r in range(log.n) if log.arrival[r] >= 0.0 and session_index[r] in sessions}
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
        from servesim.report.classes import class_section
        from servesim.report.subset import subset_log

        warm = self.warmup_ids(log, replayer.session_index, replayer.warm_sessions)
        keep = [r for r in range(log.n) if log.arrival[r] >= 0.0 and r not in warm]
        start = min((log.arrival[r] for r in keep), default=0.0)
        measured = subset_log(log, keep, start)
        report = build_report(measured, cfg, resolved)
        shown = subset_log(log, keep)
        extra = dict(shown.extra or {})
        extra["request_id"] = list(keep)
        refused = {} if self.control is None else self.control.rejected
        if self.control is not None or self.classes:
            reasons = [refused.get(r) for r in keep]
            if self.control is not None:
                extra["refused_by"] = reasons
            by_reason: dict[str, int] = {}
            for why in reasons:
                if why is not None:
                    by_reason[why] = by_reason.get(why, 0) + 1
            report["failed"] -= sum(by_reason.values())
            report["rejected"] = sum(by_reason.values())
            report["rejected_by"] = dict(sorted(by_reason.items()))
        if self.classes:
            extra["class"] = [self.classes[self.class_of[r]].name for r in keep]
            new_refused = {i: refused[r] for i, r in enumerate(keep) if r in refused}
            report["classes"] = clean_floats(class_section(
                measured, [self.class_of[r] for r in keep], self.classes, new_refused, cfg,
                report["duration"]))
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


__all__ = ["ReportScope"]
