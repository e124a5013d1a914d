"""Admission control: which due requests enter the cluster (``workload.admission``,
docs/workloads.md).

An admission policy is a plugin kind (``servesim_register_admission_policies``): a class built
as ``Policy(options, classes)`` from the options of ``workload.admission`` (everything but
``type``) and the configured SLO classes, whose ``admit(candidate)`` returns None to admit the
request or the reason it is turned away. The driver asks it for every due request before
routing (:meth:`servesim.replay.driver.Replayer.refuse` ends a refused one: it arrives and
fails at once, unrouted, and its session goes on as after any rejection).
:class:`AdmissionControl` keeps what a policy reads (requests in flight, in total and per
class) and counts the rejections per class and reason.

Built-ins: ``always`` (admits everything), ``queue_shed`` (past ``max_in_flight`` requests in
the cluster, turns away requests of the shed classes: by default the lowest class, the one
with the largest ``priority`` value) and ``token_bucket`` (a bucket of ``burst`` requests
refilled at ``rate`` requests per simulated second, one bucket per class or per session).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any, Protocol

from attrs import define, frozen

from servesim.config.workload_scope import SloClassConfig
from servesim.errors import ConfigError


@frozen
class AdmissionCandidate:
    """A due request as a policy sees it: its id, class (index into the configured classes,
    and name), session, prompt length, the simulated time, and the requests in flight then
    (arrived, not finished), in the cluster and in its class."""

    request_id: int
    class_index: int
    class_name: str
    session_id: str
    input_length: int
    now_ms: float
    in_flight: int
    in_flight_in_class: int


class AdmissionPolicy(Protocol):
    """What an ``admission_policy`` plugin registers (a class)."""

    def __init__(self, options: dict[str, Any], classes: Sequence[SloClassConfig]) -> None: ...

    def admit(self, candidate: AdmissionCandidate) -> str | None:
        """None to admit ``candidate``, else the reason it is refused (a short word)."""


def _option(options: dict[str, Any], key: str, default: Any, ok: Any, expected: str) -> Any:
    value = options.get(key, default)
    if not ok(value):
        raise ConfigError(f"expected {expected}, got {value!r}", path=f"workload.admission.{key}")
    return value


def _known(options: dict[str, Any], keys: tuple[str, ...]) -> None:
    for key in options:
        if key not in keys:
            raise ConfigError(f"unknown option {key!r} (known: {', '.join(keys) or 'none'})",
                              path=f"workload.admission.{key}")


def _number(lo: float) -> Any:
    return lambda v: (isinstance(v, (int, float)) and not isinstance(v, bool)
                      and math.isfinite(v) and v > lo)


class AlwaysAdmit:
    """Admits every request (the default without ``workload.admission``)."""

    def __init__(self, options: dict[str, Any], classes: Sequence[SloClassConfig]) -> None:
        _known(options, ())

    def admit(self, candidate: AdmissionCandidate) -> str | None:
        return None


class QueueShed:
    """``max_in_flight``: past this many requests in flight, requests of the ``shed`` classes
    (default: the lowest class) are refused with reason ``queue_full``."""

    def __init__(self, options: dict[str, Any], classes: Sequence[SloClassConfig]) -> None:
        _known(options, ("max_in_flight", "shed"))
        self.max_in_flight = _option(options, "max_in_flight", None,
                                     lambda v: isinstance(v, int) and not isinstance(v, bool) and v >= 1,
                                     "an integer >= 1")
        names = [c.name for c in classes] or ["default"]
        # The lowest class: the largest priority value (lower is served first); ties: the last.
        ranked = sorted(range(len(names)), key=lambda i: (classes[i].priority or 0) if classes else 0)
        default = [names[ranked[-1]]]
        shed = _option(options, "shed", default,
                       lambda v: isinstance(v, list) and v and all(n in names for n in v),
                       f"a list of class names among {names}")
        self.shed = {names.index(n) for n in shed}

    def admit(self, candidate: AdmissionCandidate) -> str | None:
        if candidate.class_index in self.shed and candidate.in_flight >= self.max_in_flight:
            return "queue_full"
        return None


@define
class _Bucket:
    tokens: float
    at_ms: float


class TokenBucket:
    """``rate`` requests per simulated second refill a bucket of at most ``burst`` requests
    (full at the start); a request takes one or is refused with reason ``rate_limited``.
    ``per``: ``class`` (a bucket per class) or ``session`` (a bucket per session, a session
    standing for a tenant). ``rate`` and ``burst`` may map class names to their own values."""

    def __init__(self, options: dict[str, Any], classes: Sequence[SloClassConfig]) -> None:
        _known(options, ("rate", "burst", "per"))
        self.per = _option(options, "per", "class", lambda v: v in ("class", "session"),
                           "'class' or 'session'")
        names = [c.name for c in classes] or ["default"]
        self.rate = self._per_class(options, "rate", names, None, _number(0.0), "a number > 0")
        self.burst = self._per_class(options, "burst", names, 1.0, _number(0.0), "a number > 0")
        self.buckets: dict[Any, _Bucket] = {}

    @staticmethod
    def _per_class(options: dict[str, Any], key: str, names: list[str], default: Any,
                   ok: Any, expected: str) -> list[float]:
        value = options.get(key, default)
        if isinstance(value, dict):
            unknown = [n for n in value if n not in names]
            if unknown or set(value) != set(names):
                raise ConfigError(f"expected a value for each class {names}, got {sorted(value)}",
                                  path=f"workload.admission.{key}")
            values = [value[n] for n in names]
        else:
            values = [value] * len(names)
        for v in values:
            if not ok(v):
                raise ConfigError(f"expected {expected} (or one per class), got {v!r}",
                                  path=f"workload.admission.{key}")
        return [float(v) for v in values]

    def admit(self, candidate: AdmissionCandidate) -> str | None:
        k = candidate.class_index
        key = (k, candidate.session_id) if self.per == "session" else k
        bucket = self.buckets.get(key)
        if bucket is None:
            bucket = self.buckets[key] = _Bucket(self.burst[k], candidate.now_ms)
        bucket.tokens = min(self.burst[k],
                            bucket.tokens + (candidate.now_ms - bucket.at_ms) * self.rate[k] / 1000.0)
        bucket.at_ms = candidate.now_ms
        if bucket.tokens >= 1.0:
            bucket.tokens -= 1.0
            return None
        return "rate_limited"


class AdmissionControl:
    """The driver's side of a policy (``Replayer.admission``): the policy, each request's
    class, the requests in flight, and the rejections per class and reason."""

    def __init__(self, policy: AdmissionPolicy, class_of: Sequence[int], class_names: Sequence[str],
                 session_of: Sequence[str], input_length: Sequence[int]) -> None:
        self.policy = policy
        self.class_of = class_of
        self.class_names = list(class_names)
        self.session_of = session_of
        self.input_length = input_length
        self.in_flight = 0
        self.in_class = [0] * len(class_names)
        self.admitted: set[int] = set()
        self.rejected: dict[int, str] = {}  # request id -> reason

    def admit(self, rid: int, now: float) -> bool:
        k = self.class_of[rid]
        reason = self.policy.admit(AdmissionCandidate(
            rid, k, self.class_names[k], self.session_of[rid], self.input_length[rid], now,
            self.in_flight, self.in_class[k]))
        if reason is not None:
            self.rejected[rid] = str(reason)
            return False
        self.admitted.add(rid)
        self.in_flight += 1
        self.in_class[k] += 1
        return True

    def finished(self, rid: int) -> None:
        if rid in self.admitted:
            self.admitted.discard(rid)
            self.in_flight -= 1
            self.in_class[self.class_of[rid]] -= 1


def build_policy(options: dict[str, Any], classes: Sequence[SloClassConfig],
                 registry: Any) -> AdmissionPolicy:
    """The policy ``workload.admission`` names (``type``), built with its other options."""
    kind = options.get("type")
    if not isinstance(kind, str) or not kind:
        raise ConfigError("expected {type: NAME, ...} naming an admission policy",
                          path="workload.admission.type")
    if kind not in registry:
        raise ConfigError(f"unknown admission policy {kind!r} (known: {', '.join(registry.names())})",
                          path="workload.admission.type")
    rest = {k: v for k, v in options.items() if k != "type"}
    policy: AdmissionPolicy = registry.get(kind)(rest, classes)
    return policy


__all__ = ["AdmissionCandidate", "AdmissionControl", "AdmissionPolicy", "AlwaysAdmit", "QueueShed",
           "TokenBucket", "build_policy"]
