"""Progress bars on a terminal's stderr (rich), for ``servesim run`` and ``servesim sweep``.

The wall clock is read here, by rich, never inside the simulation: the replayer only reports
``(completed, total, simulated ms)``. rich is imported when a bar is first shown, so a run on a
pipe, or one shorter than ``delay_s``, never loads it. The bar is refreshed by the caller's
updates, not by a thread, and never writes to stdout.
"""

from __future__ import annotations

import time
from typing import IO, Any


class _Bar:
    """A rich bar with the given extra text columns, started on the first shown update."""

    def __init__(self, stream: IO[str], delay_s: float, interval_s: float) -> None:
        self.stream = stream
        self.delay_s = delay_s
        self.interval_s = interval_s
        self.start = time.monotonic()
        self.last = -1.0
        self._progress: Any = None
        self._task: Any = None

    def _columns(self) -> list[Any]:
        raise NotImplementedError

    def _due(self, final: bool) -> bool:
        wall = time.monotonic()
        if self._progress is None and wall - self.start < self.delay_s:
            return False
        if self._progress is not None and wall - self.last < self.interval_s and not final:
            return False
        self.last = wall
        return True

    def _update(self, completed: int, total: int, **fields: Any) -> None:
        if self._progress is None:
            from rich.console import Console
            from rich.progress import Progress

            console = Console(file=self.stream, force_terminal=True, stderr=True)
            self._progress = Progress(*self._columns(), console=console, auto_refresh=False)
            self._task = self._progress.add_task("", total=total, completed=completed, **fields)
            # rich's clock starts now; show the time since the work began instead.
            self._progress.tasks[0].start_time = self._progress.get_time() - (
                time.monotonic() - self.start)
            self._progress.start()
        self._progress.update(self._task, completed=completed, total=total, **fields)
        self._progress.refresh()

    def finish(self) -> None:
        if self._progress is not None:
            self._progress.stop()
            self._progress = None


def _text(template: str) -> Any:
    from rich.progress import TextColumn

    return TextColumn(template)


class RunProgress(_Bar):
    """``servesim run``: requests done/total, simulated time, wall time, ETA, requests/s.
    Call it as the replayer's ``progress(completed, total, now_ms)``."""

    def __init__(self, stream: IO[str], delay_s: float = 1.0, interval_s: float = 0.1) -> None:
        super().__init__(stream, delay_s, interval_s)

    def _columns(self) -> list[Any]:
        from rich.progress import BarColumn, TimeElapsedColumn, TimeRemainingColumn

        return [BarColumn(), _text("{task.completed}/{task.total} requests"),
                _text("sim {task.fields[sim]}"), _text("wall"), TimeElapsedColumn(),
                _text("ETA"), TimeRemainingColumn(), _text("{task.fields[rate]} req/s")]

    def __call__(self, completed: int, total: int, now_ms: float) -> None:
        if not self._due(completed == total):
            return
        elapsed = max(time.monotonic() - self.start, 1e-9)
        self._update(completed, total, sim=f"{now_ms / 1000.0:,.1f} s",
                     rate=f"{completed / elapsed:,.0f}")


class SweepProgress(_Bar):
    """``servesim sweep``: points done/total, failures, wall time and ETA."""

    def __init__(self, stream: IO[str], delay_s: float = 0.0, interval_s: float = 0.1) -> None:
        super().__init__(stream, delay_s, interval_s)

    def _columns(self) -> list[Any]:
        from rich.progress import BarColumn, TimeElapsedColumn, TimeRemainingColumn

        return [BarColumn(), _text("{task.completed}/{task.total} points"),
                _text("{task.fields[failed]} failed"), _text("wall"), TimeElapsedColumn(),
                _text("ETA"), TimeRemainingColumn()]

    def __call__(self, done: int, total: int, failed: int) -> None:
        if self._due(done == total):
            self._update(done, total, failed=str(failed))
