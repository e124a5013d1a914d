"""``vllm:lora_requests_info`` over a replay: which adapters have waiting and running requests
at each scrape (servesim_prometheus.replay).

A LoRA request (``log.extra["lora"]``, adapter id >= 1) waits from its arrival to its first
admission and runs from then to its completion (a rejected request only waits, until it is
rejected). At scrape ``k`` every change at or before the scrape's time counts, as for the other
families. Adapter names are the served names (``engine.lora_modules``' ``name``; others
``adapter-<id>``, servesim.mechanics.lora.adapter_name), in ascending id order.
"""

from __future__ import annotations

from typing import Any

from servesim.mechanics.lora import adapter_name


class LoraSweep:
    """Waiting and running request counts per adapter, advanced scrape by scrape."""

    def __init__(self, log: Any, names: dict[int, str] | None = None) -> None:
        self.names = names or {}
        loras = (log.extra or {}).get("lora") or []
        events: list[tuple[float, int, int, int]] = []  # (time, lora, waiting delta, running delta)
        for rid, lora in enumerate(loras):
            if not lora or log.arrival[rid] < 0.0:
                continue
            admitted, done = log.admitted[rid], log.done[rid]
            events.append((log.arrival[rid], lora, 1, 0))
            if admitted >= 0.0:
                events.append((admitted, lora, -1, 1))
                if done >= 0.0:
                    events.append((done, lora, 0, -1))
            elif done >= 0.0:
                events.append((done, lora, -1, 0))
        events.sort()
        self.events = events
        self.next = 0
        self.waiting: dict[int, int] = {}
        self.running: dict[int, int] = {}

    def advance(self, until_ms: float) -> tuple[list[str], list[str]]:
        """Apply the changes up to ``until_ms``; the adapters with waiting and running requests."""
        ev, i = self.events, self.next
        while i < len(ev) and ev[i][0] <= until_ms:
            _t, lora, dw, dr = ev[i]
            self.waiting[lora] = self.waiting.get(lora, 0) + dw
            self.running[lora] = self.running.get(lora, 0) + dr
            i += 1
        self.next = i
        names = self.names
        return ([names.get(k) or adapter_name(k) for k in sorted(self.waiting) if self.waiting[k] > 0],
                [names.get(k) or adapter_name(k) for k in sorted(self.running) if self.running[k] > 0])


__all__ = ["LoraSweep"]
