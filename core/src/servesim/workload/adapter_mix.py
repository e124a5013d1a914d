"""The synthetic generator's LoRA adapter mix (``workload.synthetic.lora_*``; docs/lora.md).

Every session is served by one adapter: with probability ``lora_fraction`` one of
``lora_adapters`` adapters (ids 1..N), else the base model (id 0). ``lora_popularity`` is
``uniform`` or ``zipf:S`` (adapter ``k`` drawn with probability proportional to ``k**-S``, so
adapter 1 is the most popular). The draws come from a generator of their own, seeded from the
workload seed, so the lengths, arrivals and prefixes of a workload do not change with its mix.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

from servesim.errors import ConfigError

if TYPE_CHECKING:
    from servesim.config.sections import SyntheticConfig
    from servesim.workload.model import Session

_STREAM = 0x10A  # the mix's own random stream, beside the workload's


def adapter_weights(popularity: str, n: int, key: str = "workload.synthetic.lora_popularity") -> list[float]:
    """Normalised popularity of adapters 1..n."""
    if popularity == "uniform":
        return [1.0 / n] * n
    name, _, arg = popularity.partition(":")
    if name == "zipf":
        try:
            s = float(arg)
        except ValueError:
            s = -1.0
        if s >= 0 and s == s and s != float("inf"):
            raw = [k ** -s for k in range(1, n + 1)]
            total = sum(raw)
            return [w / total for w in raw]
    raise ConfigError(f"expected 'uniform' or 'zipf:S' with S >= 0, got {popularity!r}", path=key)


def assign_adapters(sessions: Sequence[Session], cfg: SyntheticConfig, seed: int) -> None:
    """Set every turn's ``lora`` (module docstring)."""
    import numpy as np

    n = cfg.lora_adapters
    frac = cfg.lora_fraction
    if not 0.0 <= frac <= 1.0:
        raise ConfigError(f"expected a number in [0, 1], got {frac!r}",
                          path="workload.synthetic.lora_fraction")
    weights = adapter_weights(cfg.lora_popularity, n)
    rng = np.random.default_rng([seed, _STREAM])
    use = rng.random(len(sessions)) < frac
    picks = rng.choice(n, size=len(sessions), p=np.asarray(weights)) + 1
    for session, on, pick in zip(sessions, use.tolist(), picks.tolist(), strict=True):
        lora = int(pick) if on else 0
        for turn in session.turns:
            turn.lora = lora


__all__ = ["adapter_weights", "assign_adapters"]
