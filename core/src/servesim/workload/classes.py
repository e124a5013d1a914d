"""SLO classes of a workload's requests (``workload.classes``, docs/workloads.md).

Every request gets one class. A trace names it per line (the ``class`` field, which must name
a configured class); a request without one takes its session's class, drawn once per session
(in session order) by the classes' shares from a ``numpy`` generator seeded by
``workload.seed`` — so a generated workload is classed by share, reproducibly. A class with a
``priority`` gives it to each of its requests (``Turn.priority``).
"""

from __future__ import annotations

from collections.abc import Sequence

from servesim.config.workload_scope import SloClassConfig
from servesim.errors import TraceError
from servesim.workload.model import Workload

# A stream of its own, so classing a workload never shifts the generator's other draws.
_CLASS_STREAM = 0x534C4F  # "SLO"


def assign_classes(workload: Workload, classes: Sequence[SloClassConfig], seed: int) -> list[int]:
    """The class index of every request id (and each class's priority set on its turns)."""
    import numpy as np

    index = {c.name: i for i, c in enumerate(classes)}
    shares = np.array([float(c.share) for c in classes])
    rng = np.random.default_rng([seed, _CLASS_STREAM])
    draws = rng.choice(len(classes), size=len(workload.sessions), p=shares / shares.sum())
    out = [0] * workload.num_requests
    for session, drawn in zip(workload.sessions, draws.tolist(), strict=True):
        for turn in session.turns:
            k = drawn
            if turn.slo_class is not None:
                k = index.get(turn.slo_class, -1)
                if k < 0:
                    raise TraceError(
                        f"field 'class': {turn.slo_class!r} is not a configured class "
                        f"(workload.classes: {', '.join(index)})",
                        file=workload.source, line=turn.line)
            out[turn.request_id] = k
            priority = classes[k].priority
            if priority is not None:
                turn.priority = priority
    return out


__all__ = ["assign_classes"]
