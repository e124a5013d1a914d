"""Free 127.0.0.1 port ranges for the sinks' sockets (each (worker, rank) takes base + offset)."""

from __future__ import annotations

import random
import socket

import pytest


def _free_range(n: int) -> int:
    rng = random.Random()
    for _ in range(200):
        base = rng.randrange(20000, 60000 - n)
        held = []
        try:
            for p in range(base, base + n):
                s = socket.socket()
                held.append(s)
                s.bind(("127.0.0.1", p))
            return base
        except OSError:
            continue
        finally:
            for s in held:
                s.close()
    raise RuntimeError(f"no {n} consecutive free ports on 127.0.0.1")


@pytest.fixture
def free_ports():  # type: ignore[no-untyped-def]
    return _free_range
