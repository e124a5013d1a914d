"""Speculative decoding (MTP / EAGLE) as the reference models it, for any backend.

One verification forward of a decoding request proposes ``aic_nextn`` draft tokens and emits
``1 + accepted`` tokens: the base token and the drafts accepted before the first rejection
(dynamo-mocker.md §8.1, aisimulate-engine.md §10). Entry ``i`` of the normalised rates is the
probability that draft ``i`` is accepted given that every earlier one was, so the expected
burst is ``1 + r0 + r0 r1 + r0 r1 r2 + ...``.

The reference seeds Rust's ``StdRng`` with ``aic_mtp_seed + seed_offset``; Python cannot
reproduce that stream, so servesim draws from :class:`random.Random` with the same seed and
matches the distribution, not the sequence. Rates of exactly 0 and 1 are exact either way,
which is what the golden tests against the reference use.

:class:`AcceptanceTally` keeps vLLM's spec-decode counters (``num_drafts``,
``num_draft_tokens``, ``num_accepted_tokens``, ``num_accepted_tokens_per_pos``, the
``vllm:spec_decode_*`` metrics of vLLM's v1 engine); counts are taken before a burst is
clamped to the request's remaining output, as vLLM's rejection sampler counts them.
"""

from __future__ import annotations

import random
from collections.abc import Sequence

from servesim.contract import DecodeAcceptance
from servesim.mechanics.numeric import normalize_conditional_accept_rates


class SpeculativeSampler:
    """Draws how many tokens each verification forward emits (``1 + accepted drafts``)."""

    __slots__ = ("rates", "nextn", "_random", "tally")

    def __init__(self, rates: Sequence[float], seed: int) -> None:
        if not rates:
            raise ValueError("a speculative sampler needs at least one acceptance rate")
        self.rates = tuple(float(r) for r in rates)
        self.nextn = len(self.rates)
        self._random = random.Random(seed).random
        self.tally = AcceptanceTally(self.nextn)

    @classmethod
    def from_config(cls, config: object, seed_offset: int) -> SpeculativeSampler | None:
        """The sampler of one rank (seed ``aic_mtp_seed + seed_offset``), or None when
        ``aic_nextn`` is unset."""
        nextn = getattr(config, "aic_nextn", None)
        if nextn is None:
            return None
        rates = normalize_conditional_accept_rates(nextn, getattr(config, "aic_nextn_accept_rates", None))
        return cls(rates, int(getattr(config, "aic_mtp_seed", 42)) + seed_offset)

    def draw(self) -> int:
        """One forward: ``1 + accepted``, counted in :attr:`tally` (unclamped)."""
        rnd = self._random
        n = 1
        for rate in self.rates:
            if rnd() >= rate:
                break
            n += 1
        self.tally.add(n - 1)
        return n

    def sample(self, remaining: int) -> int:
        """Tokens a request with ``remaining`` outputs left emits in this forward: the draw
        clamped to ``remaining``; 0 (and no draw) when nothing is left."""
        if remaining <= 0:
            return 0
        n = self.draw()
        return n if n < remaining else remaining


class Speculation:
    """One rank's speculative decoding: its sampler and the largest burst a request may emit
    in one forward (``aic_nextn + 1``; 1 on a prefill worker, whose only token comes out of
    the prefill forward, without drafts)."""

    __slots__ = ("sampler", "max_burst", "prefill_worker")

    def __init__(self, sampler: SpeculativeSampler, prefill_worker: bool) -> None:
        self.sampler = sampler
        self.prefill_worker = prefill_worker
        self.max_burst = 1 if prefill_worker else sampler.nextn + 1

    @classmethod
    def build(cls, config: object, seed_offset: int) -> Speculation | None:
        """None when ``aic_nextn`` is unset."""
        sampler = SpeculativeSampler.from_config(config, seed_offset)
        if sampler is None:
            return None
        worker = getattr(config, "worker_type", None)
        return cls(sampler, getattr(worker, "value", worker) == "prefill")

    def largest_burst(self, remaining: int) -> int:
        """What a request with ``remaining`` outputs may emit this forward (the blocks to
        reserve before sampling)."""
        return self.max_burst if self.max_burst < remaining else remaining

    def draw_burst(self, remaining: int) -> int:
        """This forward's burst: 1 on a prefill worker (no draw), else a clamped draw."""
        if self.prefill_worker:
            return 1 if remaining > 0 else 0
        return self.sampler.sample(remaining)


class AcceptanceTally:
    """Counters of one rank, drained once per pass into ``PassCompletionEffects``."""

    __slots__ = ("nextn", "drafts", "accepted", "per_pos")

    def __init__(self, nextn: int) -> None:
        self.nextn = nextn
        self.drafts = 0
        self.accepted = 0
        self.per_pos = [0] * nextn

    def add(self, accepted: int) -> None:
        self.drafts += 1
        self.accepted += accepted
        per_pos = self.per_pos
        for i in range(accepted):
            per_pos[i] += 1

    def take(self) -> DecodeAcceptance:
        """The pass's :class:`DecodeAcceptance` (tokens = base + accepted, per forward), and
        reset."""
        out = DecodeAcceptance(
            self.accepted + self.drafts, self.drafts, self.nextn, tuple(self.per_pos)
        )
        self.drafts = 0
        self.accepted = 0
        self.per_pos = [0] * self.nextn
        return out


def acceptance_report(drafts: int, nextn: int, accepted: int, per_pos: Sequence[int]) -> dict[str, object]:
    """The report's speculative-decoding keys, named after vLLM's spec-decode metrics
    (``vllm:spec_decode_num_drafts`` ...) and the statistics vLLM logs from them: mean
    acceptance length ``1 + accepted / drafts`` (the reference's accepted tokens per decode
    forward), per-position acceptance rate ``per_pos[i] / drafts``, and the draft acceptance
    rate ``accepted / draft tokens``."""
    draft_tokens = drafts * nextn
    return {
        "spec_decode_num_drafts": drafts,
        "spec_decode_num_draft_tokens": draft_tokens,
        "spec_decode_num_accepted_tokens": accepted,
        "spec_decode_num_accepted_tokens_per_pos": list(per_pos),
        "spec_decode_mean_acceptance_length": (1.0 + accepted / drafts) if drafts else None,
        "spec_decode_acceptance_rate_per_pos": [p / drafts for p in per_pos] if drafts else None,
        "spec_decode_draft_acceptance_rate": (accepted / draft_tokens) if draft_tokens else None,
    }


__all__ = ["AcceptanceTally", "Speculation", "SpeculativeSampler", "acceptance_report"]
