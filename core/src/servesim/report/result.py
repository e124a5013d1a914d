"""What a finished replay returns (:func:`servesim.replay.runner.simulate`)."""

from __future__ import annotations

from typing import Any

from attrs import define

from servesim.report.stats import RequestLog


@define
class SimResult:
    """The run's report dict, the per-request log and the session id of every request."""

    report: dict[str, Any]
    log: RequestLog
    session_ids: list[str]
    passes: int
