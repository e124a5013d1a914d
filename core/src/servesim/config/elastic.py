"""The ``lifecycle:``, ``planner:`` and ``faults:`` sections: an elastic, failing cluster
(servesim.replay.elastic; docs/elastic.md documents every key).

All three are optional and off by default: a configuration without them loads, resolves and
replays exactly as before (the resolved configuration leaves them out).
"""

from __future__ import annotations

import enum
import math
from typing import Any, ClassVar

from attrs import field, frozen

from servesim.config.converter import Problem


class DrainPolicy(enum.Enum):
    """What a removed worker does with its requests: ``wait`` takes no new ones and finishes
    those it holds; ``redirect`` also hands its waiting (not yet admitted) ones back to the
    router; ``immediate`` stops at once, its requests failing or retried per ``retry``."""

    WAIT = "wait"
    REDIRECT = "redirect"
    IMMEDIATE = "immediate"


@frozen(kw_only=True)
class WarmupConfig:
    """For ``duration_s`` after its start-up a new worker's passes take ``factor`` (>= 1)
    times their modelled time (cold caches, graph capture, JIT)."""

    duration_s: float = 0.0
    factor: float = 1.0


@frozen(kw_only=True)
class RetryConfig:
    """A request whose worker fails under it is sent again (from scratch, keeping its arrival
    time) up to ``max_attempts`` times, ``backoff_s`` after the failure; beyond that, or with
    0, it fails."""

    max_attempts: int = 0
    backoff_s: float = 0.0


@frozen(kw_only=True)
class LifecycleConfig:
    """How workers come and go: ``startup_s`` from a scale-up to the worker's start of
    service (``warmup`` after that), ``drain`` for removed workers, ``retry`` for requests on
    a worker that fails or is stopped at once, and per-pool bounds on the planner's targets
    (``min_workers``, ``max_workers``; null: unbounded above)."""

    startup_s: float = 0.0
    warmup: WarmupConfig = field(factory=WarmupConfig)
    drain: DrainPolicy = DrainPolicy.WAIT
    retry: RetryConfig = field(factory=RetryConfig)
    min_workers: int = 0
    max_workers: int | None = None


@frozen(kw_only=True)
class CrashConfig:
    """Worker ``worker`` crashes at ``at_s``."""

    at_s: float
    worker: int


@frozen(kw_only=True)
class SlowConfig:
    """Worker ``worker``'s passes take ``factor`` (>= 1) times their modelled time from
    ``from_s`` until ``until_s``."""

    worker: int
    from_s: float
    until_s: float
    factor: float


@frozen(kw_only=True)
class KvViewConfig:
    """The router sees worker ``worker``'s KV events ``delay_ms`` late, and misses each with
    probability ``drop`` (null worker: every worker)."""

    worker: int | None = None
    delay_ms: float = 0.0
    drop: float = 0.0


class TransferFallback(enum.Enum):
    """What a request does once its KV transfer has failed ``max_retries + 1`` times:
    ``local_prefill``: its decode worker computes the prompt itself; ``fail``: it is lost
    (failed, or sent again from scratch per ``lifecycle.retry``)."""

    LOCAL_PREFILL = "local_prefill"
    FAIL = "fail"


@frozen(kw_only=True)
class TransferFailureConfig:
    """The first ``count`` KV transfers of request ``request`` fail."""

    request: int
    count: int = 1


@frozen(kw_only=True)
class KvTransferConfig:
    """KV-transfer failures of a prefill/decode split: each transfer fails with probability
    ``failure_rate`` (seeded per request and try) or as scripted in ``failures``; a failed
    transfer is tried again (another full transfer time) up to ``max_retries`` times, then
    ``fallback`` applies."""

    failure_rate: float = 0.0
    failures: tuple[TransferFailureConfig, ...] = ()
    max_retries: int = 0
    fallback: TransferFallback = TransferFallback.LOCAL_PREFILL


@frozen(kw_only=True)
class RejectionsConfig:
    """Requests rejected on arrival with a reason (as llm-d-inference-sim's
    ``--failure-injection-rate`` and failure types inject them): each arriving request is
    rejected with probability ``rate`` (seeded per request), its reason drawn from ``reasons``
    (reason -> relative weight; by default every rejection is ``overloaded``)."""

    rate: float = 0.0
    reasons: dict[str, float] = field(factory=lambda: {"overloaded": 1.0})


@frozen(kw_only=True)
class FaultsConfig:
    """Seeded faults: scripted ``crashes``, random crashes per worker (exponential times
    between failures of mean ``mtbf_s``; null: none), each crashed worker back after
    ``restart_s``; ``slow`` windows; ``kv_view`` delays and drops of the router's KV view;
    ``kv_transfer`` failures (a prefill/decode split only); ``rejections`` on arrival."""

    #: Left out of the report's config echo while unset (added after the section was).
    report_omits_defaults: ClassVar[frozenset[str]] = frozenset({"kv_transfer", "rejections"})

    seed: int = 0
    crashes: tuple[CrashConfig, ...] = ()
    mtbf_s: float | None = None
    restart_s: float = 0.0
    slow: tuple[SlowConfig, ...] = ()
    kv_view: tuple[KvViewConfig, ...] = ()
    kv_transfer: KvTransferConfig | None = None
    rejections: RejectionsConfig | None = None


#: The optional sections (name -> class), structured only when present.
ELASTIC_SECTIONS: dict[str, type] = {"lifecycle": LifecycleConfig, "faults": FaultsConfig}


def _ge(v: Any, x: float) -> bool:
    return isinstance(v, (int, float)) and math.isfinite(v) and v >= x


def check_elastic(lifecycle: LifecycleConfig | None, faults: FaultsConfig | None) -> list[Problem]:
    """Range checks of the two sections, each problem naming its key path."""
    out: list[Problem] = []
    if lifecycle is not None:
        for path, v, low in (("lifecycle.startup_s", lifecycle.startup_s, 0.0),
                             ("lifecycle.warmup.duration_s", lifecycle.warmup.duration_s, 0.0),
                             # a pass may end late, never before its modelled end
                             ("lifecycle.warmup.factor", lifecycle.warmup.factor, 1.0),
                             ("lifecycle.retry.max_attempts", lifecycle.retry.max_attempts, 0),
                             ("lifecycle.retry.backoff_s", lifecycle.retry.backoff_s, 0.0),
                             ("lifecycle.min_workers", lifecycle.min_workers, 0)):
            if not _ge(v, low):
                out.append((path, f"expected a finite number >= {low:g}, got {v!r}"))
        hi = lifecycle.max_workers
        if hi is not None and not (isinstance(hi, int) and hi >= max(1, lifecycle.min_workers)):
            out.append(("lifecycle.max_workers",
                        f"expected null or an integer >= max(1, min_workers), got {hi!r}"))
    if faults is not None:
        if faults.seed < 0:
            out.append(("faults.seed", f"expected an integer >= 0, got {faults.seed}"))
        if faults.mtbf_s is not None and not (_ge(faults.mtbf_s, 0.0) and faults.mtbf_s > 0):
            out.append(("faults.mtbf_s", f"expected null or a finite number > 0, got {faults.mtbf_s!r}"))
        if not _ge(faults.restart_s, 0.0):
            out.append(("faults.restart_s", f"expected a finite number >= 0, got {faults.restart_s!r}"))
        for i, c in enumerate(faults.crashes):
            if not _ge(c.at_s, 0.0):
                out.append((f"faults.crashes[{i}].at_s", f"expected a finite number >= 0, got {c.at_s!r}"))
            if c.worker < 0:
                out.append((f"faults.crashes[{i}].worker", f"expected a worker id >= 0, got {c.worker}"))
        for i, s in enumerate(faults.slow):
            if s.worker < 0:
                out.append((f"faults.slow[{i}].worker", f"expected a worker id >= 0, got {s.worker}"))
            if not (_ge(s.from_s, 0.0) and _ge(s.until_s, 0.0) and s.until_s >= s.from_s):
                out.append((f"faults.slow[{i}].until_s", "expected 0 <= from_s <= until_s (finite)"))
            if not _ge(s.factor, 1.0):  # a pass may end late, never before its modelled end
                out.append((f"faults.slow[{i}].factor", f"expected a finite number >= 1, got {s.factor!r}"))
        for i, k in enumerate(faults.kv_view):
            if k.worker is not None and k.worker < 0:
                out.append((f"faults.kv_view[{i}].worker", f"expected null or a worker id >= 0, got {k.worker}"))
            if not _ge(k.delay_ms, 0.0):
                out.append((f"faults.kv_view[{i}].delay_ms", f"expected a finite number >= 0, got {k.delay_ms!r}"))
            if not (_ge(k.drop, 0.0) and k.drop <= 1.0):
                out.append((f"faults.kv_view[{i}].drop", f"expected a probability in [0, 1], got {k.drop!r}"))
        out += _check_transfer(faults.kv_transfer)
        out += _check_rejections(faults.rejections)
    return out


def _check_rejections(rj: RejectionsConfig | None) -> list[Problem]:
    out: list[Problem] = []
    if rj is None:
        return out
    if not (_ge(rj.rate, 0.0) and rj.rate <= 1.0):
        out.append(("faults.rejections.rate",
                    f"expected a probability in [0, 1], got {rj.rate!r}"))
    if not rj.reasons:
        out.append(("faults.rejections.reasons", "expected at least one reason"))
    for reason, weight in rj.reasons.items():
        if not reason.strip():
            out.append(("faults.rejections.reasons",
                        f"expected non-empty reason names, got {reason!r}"))
        elif not (_ge(weight, 0.0) and weight > 0.0):
            out.append((f"faults.rejections.reasons.{reason}",
                        f"expected a finite weight > 0, got {weight!r}"))
    return out


def _check_transfer(kt: KvTransferConfig | None) -> list[Problem]:
    out: list[Problem] = []
    if kt is None:
        return out
    if not (_ge(kt.failure_rate, 0.0) and kt.failure_rate <= 1.0):
        out.append(("faults.kv_transfer.failure_rate",
                    f"expected a probability in [0, 1], got {kt.failure_rate!r}"))
    if kt.max_retries < 0:
        out.append(("faults.kv_transfer.max_retries", f"expected an integer >= 0, got {kt.max_retries}"))
    for i, f in enumerate(kt.failures):
        if f.request < 0:
            out.append((f"faults.kv_transfer.failures[{i}].request",
                        f"expected a request id >= 0, got {f.request}"))
        if f.count < 1:
            out.append((f"faults.kv_transfer.failures[{i}].count",
                        f"expected an integer >= 1, got {f.count}"))
    return out
