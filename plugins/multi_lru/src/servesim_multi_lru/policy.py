"""``multi_lru``: frequency tiers, promoted by hits; LRU inside a tier, coldest tier first.

Dynamo's kvbm-logical ``MultiLruBackend`` (``pools/inactive/backends/multi_lru_backend.rs``,
one of the reference mocker's eviction backends, dynamo-mocker.md §1.1 and §3.3) keeps four
LRU lists and files a block, when it becomes inactive, into the level its access frequency
reaches: below ``thresholds[0]`` (default 2) cold, below ``thresholds[1]`` (6) warm, below
``thresholds[2]`` (15) hot, else very hot. Eviction takes the least recently inserted block of
the coldest non-empty level. Here the frequency is the record's ``hit_count`` (every reuse,
also of a block another request holds, so a block in use is promoted when it is released
again), and the thresholds are an option: ``n`` ascending thresholds give ``n + 1`` tiers.
"""

from __future__ import annotations

from bisect import bisect_right

import attrs
from attrs import field, frozen
from servesim.kv.eviction import EvictableBlock
from servesim.kv.eviction_keyed import KeyedEviction


def _ascending(_obj: object, attr: attrs.Attribute, value: tuple[int, ...]) -> None:
    # (message, attribute): the config loader then reports the key path of the field.
    if not value:
        raise ValueError("expected at least one threshold", attr)
    if any(t < 1 for t in value):
        raise ValueError("expected every threshold >= 1 (0 hits is the coldest tier)", attr)
    if any(b <= a for a, b in zip(value, value[1:], strict=False)):
        raise ValueError(f"expected strictly ascending thresholds, got {list(value)}", attr)


@frozen(kw_only=True)
class MultiLruConfig:
    """``engine.eviction_policy: {type: multi_lru, thresholds: [2, 6, 15]}``."""

    thresholds: tuple[int, ...] = field(default=(2, 6, 15), converter=tuple, validator=_ascending)

    @property
    def tiers(self) -> int:
        return len(self.thresholds) + 1


class MultiLruEviction(KeyedEviction):
    """Tier by hit count (``bisect`` over the thresholds), then insertion order."""

    config_class = MultiLruConfig

    def __init__(self, config: MultiLruConfig | None = None) -> None:
        super().__init__(config if config is not None else MultiLruConfig())
        self.thresholds = list(self.config.thresholds)

    def tier(self, block: EvictableBlock) -> int:
        """0 (cold) .. ``len(thresholds)``: how many thresholds the hit count reaches."""
        return bisect_right(self.thresholds, block.hit_count)

    def key(self, block: EvictableBlock) -> int:
        return self.tier(block)


__all__ = ["MultiLruConfig", "MultiLruEviction"]
