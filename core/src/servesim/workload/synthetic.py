"""Seeded synthetic workloads: lengths from distribution specs, rate or burst arrivals,
shared-prefix groups and multi-turn sessions (dynamo-mocker.md §9.1 "Synthetic").

Length specs use the same compact grammar as the shared trace generator:
``fixed:N``, ``uniform:LO:HI`` (inclusive), ``normal:MEAN:STD[:LO:HI]``,
``lognormal:MEDIAN:SIGMA[:LO:HI]`` (rounded, clipped; default bounds ``[1, inf)``) and
``choice:A,B,C``. Everything draws from one ``numpy.random.Generator`` seeded by
``workload.seed``, in a fixed order, so equal configs give equal workloads.

A session's later turn extends its previous prompt: the previous turn's hash ids (whole
blocks) followed by fresh blocks for the turn's new input, so prefix caching sees the history.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from servesim.config.sections import SyntheticConfig
from servesim.errors import ConfigError
from servesim.tokens import RepeatedBlockTokens
from servesim.workload.adapter_mix import assign_adapters
from servesim.workload.model import Session, Turn, Workload, make_workload

if TYPE_CHECKING:
    import numpy as np

_GROUP_SPAN = 1 << 10
_UNIQUE_BASE = 1 << 28

LengthSampler = Callable[[Any], int]
"""Draws one length from a ``numpy.random.Generator``."""


# Lengths are tokens: past 16M (longer than any model context) a length is a typo, and its
# prompt's hash ids alone would take gigabytes.
MAX_LENGTH = 1 << 24


def _floats(parts: list[str], spec: str, key: str, *, inf_last: bool = False) -> list[float]:
    """The numbers of a spec, all finite (the last may be ``inf`` when ``inf_last``)."""
    try:
        vals = [float(p) for p in parts]
    except ValueError:
        raise ConfigError(f"bad length spec {spec!r}: expected numbers", path=key) from None
    for i, v in enumerate(vals):
        if math.isnan(v) or (math.isinf(v) and not (inf_last and i == len(vals) - 1 and v > 0)):
            raise ConfigError(
                f"bad length spec {spec!r}: expected finite numbers, got {parts[i]!r}", path=key
            )
    return vals


def parse_length_spec(spec: str, key: str = "length", minimum: int = 0) -> LengthSampler:
    """A sampler for ``spec``; a malformed spec is a ConfigError naming ``key``.

    Every length the spec can produce lies in ``[minimum, MAX_LENGTH]``: ``minimum`` is 1 for
    prompt lengths, since an empty prompt is rejected by every engine.
    """
    kind, _, rest = str(spec).partition(":")
    parts = rest.split(":") if rest else []
    floor = f"integer in [{minimum}, {MAX_LENGTH}]"
    if kind == "fixed" and len(parts) == 1:
        (n,) = _floats(parts, spec, key)
        if not minimum <= n <= MAX_LENGTH or n != int(n):
            raise ConfigError(f"bad length spec {spec!r}: N must be an {floor}", path=key)
        value = int(n)
        return lambda rng: value
    if kind == "uniform" and len(parts) == 2:
        lo, hi = _floats(parts, spec, key)
        if lo < minimum or hi < lo or hi > MAX_LENGTH or lo != int(lo) or hi != int(hi):
            raise ConfigError(
                f"bad length spec {spec!r}: need integers {minimum} <= LO <= HI <= {MAX_LENGTH}", path=key
            )
        low, high = int(lo), int(hi) + 1
        return lambda rng: int(rng.integers(low, high))
    if kind in ("normal", "lognormal") and len(parts) in (2, 4):
        vals = _floats(parts, spec, key, inf_last=len(parts) == 4)
        lo, hi = (vals[2], vals[3]) if len(parts) == 4 else (1.0, math.inf)
        if vals[1] < 0 or hi < lo or lo < minimum:
            raise ConfigError(
                f"bad length spec {spec!r}: need SIGMA >= 0 and {minimum} <= LO <= HI", path=key
            )
        centre, spread = vals[0], vals[1]
        top = min(hi, MAX_LENGTH)
        if kind == "normal":
            def draw(rng: np.random.Generator) -> float:
                return centre + spread * float(rng.standard_normal())
        else:
            def draw(rng: np.random.Generator) -> float:
                # exp() of a huge exponent overflows; such a draw is clipped to the top anyway
                z = spread * float(rng.standard_normal())
                return centre * math.exp(z) if z < 700 else math.copysign(math.inf, centre)
        # clip before rounding: round(inf) raises
        return lambda rng: int(round(min(max(draw(rng), lo), top)))
    if kind == "choice" and len(parts) == 1:
        opts = _floats(parts[0].split(","), spec, key)
        if any(not minimum <= o <= MAX_LENGTH or o != int(o) for o in opts):
            raise ConfigError(
                f"bad length spec {spec!r}: choices must be integers in [{minimum}, {MAX_LENGTH}]", path=key
            )
        ints = [int(o) for o in opts]
        return lambda rng: ints[int(rng.integers(0, len(ints)))]
    raise ConfigError(
        f"bad length spec {spec!r}: expected fixed:N, uniform:LO:HI, normal:MEAN:STD[:LO:HI], "
        "lognormal:MEDIAN:SIGMA[:LO:HI] or choice:A,B,C",
        path=key,
    )


def _arrival_gaps(cfg: SyntheticConfig, rng: np.random.Generator, n: int) -> list[float]:
    if cfg.arrival == "burst" or cfg.rate == 0:
        return [0.0] * n
    if cfg.rate < 0 or not math.isfinite(cfg.rate):
        raise ConfigError(f"must be a finite rate >= 0, got {cfg.rate}", path="workload.synthetic.rate")
    mean_gap = 1000.0 / cfg.rate
    if cfg.arrival == "constant":
        return [mean_gap] * n
    if cfg.arrival == "poisson":
        return [float(g) for g in rng.exponential(mean_gap, n)]
    raise ConfigError(
        f"unknown arrival {cfg.arrival!r}; expected poisson, constant or burst",
        path="workload.synthetic.arrival",
    )


def _validate(cfg: SyntheticConfig) -> None:
    checks = [
        ("num_requests", cfg.num_requests >= 0, "must be >= 0"),
        ("block_size", cfg.block_size > 0, "must be > 0"),
        ("prefix_groups", 0 <= cfg.prefix_groups < (1 << 17), "must be in [0, 131072)"),
        ("prefix_ratio", 0.0 <= cfg.prefix_ratio <= 1.0, "must be in [0, 1]"),
        ("turns_per_session", cfg.turns_per_session >= 1, "must be >= 1"),
        ("inter_turn_delay_ms", cfg.inter_turn_delay_ms >= 0, "must be >= 0"),
        ("lora_adapters", 0 <= cfg.lora_adapters <= 1 << 16, "must be in [0, 65536]"),
    ]
    for key, ok, msg in checks:
        if not ok:
            raise ConfigError(f"{msg}, got {getattr(cfg, key)!r}", path=f"workload.synthetic.{key}")


def generate(cfg: SyntheticConfig, seed: int = 0) -> Workload:
    """Build the workload ``cfg`` describes; ``num_requests`` counts requests (turns)."""
    _validate(cfg)
    isl = parse_length_spec(cfg.input_length, "workload.synthetic.input_length", minimum=1)
    osl = parse_length_spec(cfg.output_length, "workload.synthetic.output_length")
    import numpy as np

    rng = np.random.default_rng(seed)
    bs = cfg.block_size
    turns = cfg.turns_per_session
    n_sessions = -(-cfg.num_requests // turns)
    gaps = _arrival_gaps(cfg, rng, n_sessions)
    # Ids become 32-bit tokens (RepeatedBlockTokens masks them), so group prefixes use
    # [0, G * 2**10) and unique blocks count up from 2**28, disjoint for any sane G.
    group_prefix: dict[int, list[int]] = {}
    next_id = _UNIQUE_BASE
    sessions: list[Session] = []
    t = 0.0
    rid = 0
    for s in range(n_sessions):
        if s > 0:
            t += gaps[s]
        session = Session(f"session_{s}", t)
        history: list[int] = []
        for k in range(min(turns, cfg.num_requests - s * turns)):
            new_len, out_len = isl(rng), osl(rng)
            new_blocks = -(-new_len // bs)
            ids: list[int] = []
            if k == 0 and cfg.prefix_groups > 0:
                g = s % cfg.prefix_groups
                shared = min(int(cfg.prefix_ratio * new_len) // bs, new_blocks)
                base = group_prefix.setdefault(g, [g * _GROUP_SPAN + j for j in range(_GROUP_SPAN)])
                ids.extend(base[: min(shared, len(base))])
            ids.extend(range(next_id, next_id + new_blocks - len(ids)))
            next_id += new_blocks
            length = len(history) * bs + new_len
            history = history + ids
            prompt = RepeatedBlockTokens(history, bs, length)
            delay = cfg.inter_turn_delay_ms if k > 0 else 0.0
            session.turns.append(Turn(rid, prompt, out_len, delay))
            rid += 1
        sessions.append(session)
    if cfg.lora_adapters > 0:
        assign_adapters(sessions, cfg, seed)
    return make_workload(sessions, "<synthetic>")
