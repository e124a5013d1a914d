"""The one place where simulated time meets the wall clock.

``speedup`` is simulated milliseconds per wall millisecond. Simulated time 0 is the moment the
clock was started; everything else in the server speaks simulated ms and asks this class when
a simulated moment falls on the event loop's clock (``loop.time()``, monotonic seconds).
"""

from __future__ import annotations

from collections.abc import Callable


class SimClock:
    """Maps simulated ms to wall seconds of ``wall`` (the event loop's ``time``)."""

    def __init__(self, speedup: float, wall: Callable[[], float]) -> None:
        if not speedup > 0:
            raise ValueError(f"speedup must be > 0, got {speedup}")
        self.speedup = speedup
        self._wall = wall
        self._origin = wall()
        self._sim_ms_per_s = 1000.0 * speedup

    def now_ms(self) -> float:
        """The simulated time now."""
        return (self._wall() - self._origin) * self._sim_ms_per_s

    def ms_at(self, wall_s: float) -> float:
        """The simulated time at wall time ``wall_s`` (``wall``'s clock)."""
        return (wall_s - self._origin) * self._sim_ms_per_s

    def wall_at(self, sim_ms: float) -> float:
        """The wall time (``wall``'s clock) at which simulated ``sim_ms`` falls."""
        return self._origin + sim_ms / self._sim_ms_per_s

    def to_wall_seconds(self, sim_ms: float) -> float:
        """A simulated duration in wall seconds."""
        return sim_ms / self._sim_ms_per_s
