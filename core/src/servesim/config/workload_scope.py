"""Which requests of a workload the report covers and when a replay ends: ``workload.warmup``,
``workload.stop`` and the SLO classes of ``workload.classes`` (docs/workloads.md).

Every setting here is off by default; :func:`check_workload_scope` checks their values, each
problem naming its key path.
"""

from __future__ import annotations

import math
from typing import Any

from attrs import frozen

from servesim.config.converter import Problem, show


@frozen(kw_only=True)
class WarmupConfig:
    """Requests that run but are left out of the report: the first ``requests`` dispatched,
    or those dispatched in the first ``duration_s`` simulated seconds; with both, the warmup
    ends at whichever comes first (AIPerf's ``--warmup-request-count`` /
    ``--warmup-duration``, docs/tutorials/warmup.md, "Combined (First One Wins)").
    ``wait``: the measured requests start only once every warmup request has finished, as
    AIPerf and ``vllm bench serve`` wait for their warm-up responses; the warmup is then the
    first ``requests`` sessions (servesim.replay.driver, "Warmup barrier")."""

    requests: int | None = None
    duration_s: float | None = None
    wait: bool = False


@frozen(kw_only=True)
class StopConfig:
    """End the replay at a simulated time (``max_virtual_time_s``, or the reference's
    ``max_sim_time_ms``) or after ``completions`` completed requests, whichever comes first."""

    max_virtual_time_s: float | None = None
    max_sim_time_ms: float | None = None
    completions: int | None = None

    @property
    def at_ms(self) -> float:
        """The simulated time the replay stops at (``inf``: no time limit)."""
        if self.max_virtual_time_s is not None:
            return self.max_virtual_time_s * 1000.0
        if self.max_sim_time_ms is not None:
            return float(self.max_sim_time_ms)
        return math.inf


@frozen(kw_only=True)
class SnapshotConfig:
    """Start each of the first ``workload.lanes`` plays part-way, at a cut drawn with ``seed``
    (AISimulate's ``agentic_snapshot``; servesim.workload.snapshot)."""

    seed: int = 0


@frozen(kw_only=True)
class SloClassConfig:
    """One SLO class: its ``name``, its ``share`` of a generated workload's sessions, the
    ``priority`` its requests get (lower is served first, as vLLM's ``Request.priority``;
    null keeps each request's own) and its SLAs (ms; unset ones are not checked)."""

    name: str
    share: float = 1.0
    priority: int | None = None
    sla_ttft_ms: float | None = None
    sla_tpot_ms: float | None = None
    sla_e2e_ms: float | None = None


def _positive(v: Any) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v) and v > 0


def check_workload_scope(workload: Any) -> list[Problem]:
    """Range problems of ``workload.warmup``, ``workload.stop`` and ``workload.classes``."""
    out: list[Problem] = []
    warmup = getattr(workload, "warmup", None)
    if warmup is not None:
        if warmup.requests is None and warmup.duration_s is None:
            out.append(("workload.warmup", "expected 'requests' or 'duration_s' (or both)"))
        if warmup.requests is not None and not (isinstance(warmup.requests, int) and warmup.requests >= 1):
            out.append(("workload.warmup.requests", f"expected an integer >= 1, got {show(warmup.requests)}"))
        if warmup.duration_s is not None and not _positive(warmup.duration_s):
            out.append(("workload.warmup.duration_s",
                        f"expected a finite number > 0, got {show(warmup.duration_s)}"))
        if not isinstance(warmup.wait, bool):
            out.append(("workload.warmup.wait", f"expected true or false, got {show(warmup.wait)}"))
        elif warmup.wait and (warmup.requests is None or warmup.duration_s is not None):
            out.append(("workload.warmup.wait", "waiting for the warmup needs its size up front: set "
                        "'requests' and not 'duration_s'"))
    stop = getattr(workload, "stop", None)
    if stop is not None:
        out += _check_stop(stop)
    out += _check_classes(tuple(getattr(workload, "classes", ())))
    lanes = getattr(workload, "lanes", None)
    if lanes is not None and not (isinstance(lanes, int) and not isinstance(lanes, bool) and lanes >= 1):
        out.append(("workload.lanes", f"expected an integer >= 1 or null, got {show(lanes)}"))
    if lanes is not None and getattr(workload, "concurrency", None) is not None:
        out.append(("workload.lanes", "expected either 'lanes' or 'concurrency', got both"))
    capped = getattr(workload, "max_concurrency", None) is not None
    if capped and getattr(workload, "concurrency", None) is not None:
        out.append(("workload.max_concurrency", "expected either 'concurrency' (closed loop, timestamps "
                    "ignored) or 'max_concurrency' (timestamps with a cap), got both"))
    if capped and lanes is not None:
        out.append(("workload.max_concurrency", "expected either 'lanes' or 'max_concurrency', got both"))
    snapshot = getattr(workload, "snapshot", None)
    if snapshot is not None:
        if lanes is None:
            out.append(("workload.snapshot", "a snapshot starts the plays of workload.lanes; set lanes"))
        seed = snapshot.seed
        if not (isinstance(seed, int) and not isinstance(seed, bool) and 0 <= seed < 1 << 64):
            out.append(("workload.snapshot.seed", f"expected an integer in [0, 2**64), got {show(seed)}"))
    return out


def _check_stop(stop: StopConfig) -> list[Problem]:
    out: list[Problem] = []
    if stop.max_virtual_time_s is None and stop.max_sim_time_ms is None and stop.completions is None:
        out.append(("workload.stop", "expected 'max_virtual_time_s', 'max_sim_time_ms' or 'completions'"))
    if stop.max_virtual_time_s is not None and stop.max_sim_time_ms is not None:
        out.append(("workload.stop.max_sim_time_ms",
                    "both 'max_virtual_time_s' and 'max_sim_time_ms' are given; use one"))
    for key in ("max_virtual_time_s", "max_sim_time_ms"):
        value = getattr(stop, key)
        if value is not None and not _positive(value):
            out.append((f"workload.stop.{key}", f"expected a finite number > 0, got {show(value)}"))
    if stop.completions is not None and not (isinstance(stop.completions, int) and stop.completions >= 1):
        out.append(("workload.stop.completions", f"expected an integer >= 1, got {show(stop.completions)}"))
    return out


def _check_classes(classes: tuple[SloClassConfig, ...]) -> list[Problem]:
    out: list[Problem] = []
    seen: set[str] = set()
    for i, c in enumerate(classes):
        at = f"workload.classes[{i}]"
        if not c.name:
            out.append((f"{at}.name", "expected a non-empty class name"))
        elif c.name in seen:
            out.append((f"{at}.name", f"class {c.name!r} is defined twice"))
        seen.add(c.name)
        if not (isinstance(c.share, (int, float)) and math.isfinite(c.share) and c.share >= 0):
            out.append((f"{at}.share", f"expected a finite number >= 0, got {show(c.share)}"))
        for key in ("sla_ttft_ms", "sla_tpot_ms", "sla_e2e_ms"):
            value = getattr(c, key)
            if value is not None and not _positive(value):
                out.append((f"{at}.{key}", f"expected a finite number > 0 or null, got {show(value)}"))
    if classes and not out and sum(c.share for c in classes) <= 0:
        out.append(("workload.classes", "expected at least one class with a share > 0"))
    return out


def admission_problems(policy: Any, options: dict[str, Any], classes: Any) -> list[Problem]:
    """The problems building the admission policy class ``policy`` (None: not found, already
    reported) from ``workload.admission``'s options raises (a ConfigError names its key)."""
    from servesim.errors import ConfigError

    if policy is None:
        return []
    try:
        policy({k: v for k, v in options.items() if k != "type"}, tuple(classes))
    except ConfigError as exc:
        message = str(exc)
        prefix = f"{exc.path}: "
        return [(exc.path or "workload.admission",
                 message[len(prefix):] if message.startswith(prefix) else message)]
    return []


SCOPE_KEYS = ("warmup", "stop", "classes", "admission", "lanes", "snapshot", "warm_cache")


def drop_unset_scope(workload: dict[str, Any]) -> None:
    """Leave the unset keys of this module out of a resolved ``workload`` section, so a
    configuration without them resolves (and reports) as it did before they existed."""
    for key in SCOPE_KEYS:
        if workload.get(key) in (None, [], ()):
            workload.pop(key, None)
    trace = workload.get("trace")
    if isinstance(trace, dict) and not trace.get("options"):
        trace.pop("options", None)


__all__ = ["SloClassConfig", "SnapshotConfig", "StopConfig", "WarmupConfig", "admission_problems",
           "check_workload_scope",
           "drop_unset_scope"]
