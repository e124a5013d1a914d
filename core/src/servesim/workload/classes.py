"""SLO classes of a workload's requests (``workload.classes``, docs/workloads.md).

Every request gets one class. A trace names it per line (the ``class`` field, which must name
a configured class); a request without one takes its session's class, drawn once per session
(in session order) by the classes' shares from a ``numpy`` generator seeded by
``workload.seed`` — so a generated workload is classed by share, reproducibly. A class with a
``priority`` gives it to each of its requests (``Turn.priority``, through
``Workload.set_priorities``, so a trace read as a stream takes it as its requests are read).
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
    drawn = rng.choice(len(classes), size=len(workload.sessions), p=shares / shares.sum()).tolist()
    session = workload.session_columns()[1]
    named = workload.named_classes()
    out = [drawn[s] for s in session]
    for rid, name in sorted(named.items()):  # in file order: the first unknown one is named
        k = index.get(name, -1)
        if k < 0:
            raise TraceError(f"field 'class': {name!r} is not a configured class "
                             f"(workload.classes: {', '.join(index)})",
                             file=workload.source, line=workload.line_of(rid))
        out[rid] = k
    priority = [c.priority for c in classes]
    if any(p is not None for p in priority):
        workload.set_priorities([priority[k] for k in out])
    return out


__all__ = ["assign_classes"]
