"""Where a sweep's points run: ``local`` (processes on this machine) or ``ray`` (a Ray
cluster). Both call :func:`servesim_sweep.point.run_point` and yield ``(index, record)`` as
points finish, in whatever order; the caller files records by index, so results do not
depend on the executor or on finishing order.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Generator, Sequence
from typing import Any

from servesim.errors import UserError

from servesim_sweep.point import new_record, run_point
from servesim_sweep.spec import Point

Result = tuple[int, dict[str, Any]]
Results = Generator[Result, None, None]


def default_parallel() -> int:
    return os.cpu_count() or 1


def run_local(base: str, points: Sequence[tuple[int, Point]], parallel: int) -> Results:
    """One process per point at most ``parallel`` at a time (``spawn``ed: no state of the
    parent is inherited); with ``parallel`` 1 the points run in this process.

    Leaving early (an interrupt in this process, or the generator closed before its end)
    terminates the workers and waits for them, so none outlives the sweep (nor, through them,
    multiprocessing's resource tracker). Workers ignore SIGINT: a Ctrl-C reaches the whole
    process group, and the sweep, not each worker, decides what it ends."""
    if parallel <= 1 or len(points) <= 1:
        for index, point in points:
            yield index, run_point(base, point)
        return
    import multiprocessing
    from concurrent.futures import ProcessPoolExecutor, as_completed

    context = multiprocessing.get_context("spawn")
    with ProcessPoolExecutor(max_workers=min(parallel, len(points)), mp_context=context,
                             initializer=_ignore_sigint) as pool:
        try:
            futures = {pool.submit(run_point, base, point): (index, point) for index, point in points}
            for future in as_completed(futures):
                index, point = futures[future]
                try:
                    record = future.result()
                except Exception as exc:  # noqa: BLE001 - a worker that died (memory) fails its point
                    record = new_record(point, exc)
                yield index, record
        except BaseException:
            _terminate(pool)
            raise


def _ignore_sigint() -> None:
    import signal

    signal.signal(signal.SIGINT, signal.SIG_IGN)


def _terminate(pool: Any) -> None:
    """Stop a process pool now: cancel what has not started, terminate the workers and reap
    them. ``ProcessPoolExecutor`` has no public way to end running workers before Python
    3.14's ``terminate_workers``; the workers are this process's only multiprocessing
    children (``multiprocessing.active_children``: the resource tracker is not one), so
    those are the ones ended."""
    import multiprocessing

    processes = multiprocessing.active_children()
    for proc in processes:
        with contextlib.suppress(Exception):
            proc.terminate()
    for proc in processes:
        with contextlib.suppress(Exception):
            proc.join(10.0)
            if proc.is_alive():
                proc.kill()
                proc.join(10.0)
    with contextlib.suppress(Exception):
        pool.shutdown(wait=True, cancel_futures=True)


def run_ray(base: str, points: Sequence[tuple[int, Point]], parallel: int,
            address: str | None) -> Results:
    """Points as Ray tasks on the cluster at ``address``, or on a local one started here
    (``parallel`` CPUs) and shut down afterwards."""
    try:
        import ray
    except ImportError:
        raise UserError("--executor ray needs Ray: pip install 'servesim-sweep[ray]'") from None
    started = False
    if not ray.is_initialized():
        if address is not None:
            _check_reachable(address)
        try:
            if address is not None:
                ray.init(address=address, log_to_driver=False)
            else:
                ray.init(num_cpus=parallel, include_dashboard=False, log_to_driver=False)
        except (ConnectionError, ValueError) as exc:  # ValueError: a malformed address
            raise UserError(f"cannot reach the Ray cluster at {address!r}: {exc}") from None
        started = True
    try:
        task = ray.remote(num_cpus=1)(run_point)
        pending = {task.remote(base, point): (index, point) for index, point in points}
        while pending:
            done, _rest = ray.wait(list(pending), num_returns=1)
            for ref in done:
                index, point = pending.pop(ref)
                try:
                    record = ray.get(ref)
                except Exception as exc:  # noqa: BLE001 - a lost task or node fails its point
                    record = new_record(point, exc)
                yield index, record
    finally:
        if started:
            ray.shutdown()


def _check_reachable(address: str) -> None:
    """Fail at once on a ``host:port`` (or ``ray://host:port``) nobody listens on: Ray itself
    retries for minutes. Other forms (``auto``) are left to Ray."""
    import socket

    host, sep, port = address.removeprefix("ray://").rpartition(":")
    if not sep or not port.isdigit() or not host:
        return
    try:
        with socket.create_connection((host, int(port)), timeout=5.0):
            pass
    except OSError as exc:
        raise UserError(f"cannot reach the Ray cluster at {address!r}: "
                        f"{exc.strerror or exc}") from None
