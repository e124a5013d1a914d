"""``sglang_sched_trace.py`` with SGLang's priority scheduling on (SGLang 0.5.23).

    ORACLE_PYTHON sglang_prio_trace.py TRACE --out STEPS [--low-priority-values-first]
        [--preemption-threshold N] [--disable-priority-preemption] [sglang_sched_trace options]

Runs the oracle tool's own ``main`` (loaded from ``$SERVESIM_SHARED/tools``) with two changes:
its ``ServerArgs`` get ``enable_priority_scheduling`` and the options above (set as the tool
derives its ``PortArgs`` from them, before SGLang reads them), and each request
handed to ``Scheduler.process_input_requests`` gets its trace line's ``priority`` (0 when
the line has none). Everything else (prompts, stub model, step records) is the tool's, and
the tool's own options pass through (``--overlap``: SGLang's overlap loop, as the
``prio_overlap_*`` goldens run it). Runs under the oracle's Python, without servesim.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import sys
from pathlib import Path

TOOL = Path(os.environ.get("SERVESIM_SHARED", "/work/shared")) / "tools" / "sglang_sched_trace.py"


def _tool():
    spec = importlib.util.spec_from_file_location("sglang_sched_trace", TOOL)
    assert spec is not None and spec.loader is not None
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def _priorities(path: str) -> dict[str, int]:
    """``rid -> priority``; the tool names requests by their line index."""
    out = {}
    with open(path) as f:
        rows = [json.loads(line) for line in f if line.strip()]
    for i, row in enumerate(rows):
        out[str(i)] = int(row.get("priority", 0))
    return out


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(add_help=False)
    p.add_argument("trace")
    p.add_argument("--low-priority-values-first", action="store_true")
    p.add_argument("--preemption-threshold", type=int, default=10)
    p.add_argument("--disable-priority-preemption", action="store_true")
    mine, rest = p.parse_known_args(argv)
    tool = _tool()
    if not tool.torchvision_loadable():
        tool.stub_modules(["torchvision"])
    import sglang.srt.server_args as server_args
    from sglang.srt.managers.scheduler import Scheduler

    prio = _priorities(mine.trace)
    port_args = server_args.PortArgs.init_new
    intake = Scheduler.process_input_requests
    extra = dict(
        enable_priority_scheduling=True,
        schedule_low_priority_values_first=mine.low_priority_values_first,
        priority_scheduling_preemption_threshold=mine.preemption_threshold,
        disable_priority_preemption=mine.disable_priority_preemption,
    )

    def init_new(args, *a, **kw):
        # The tool builds its ServerArgs and, next, its PortArgs from them (before it
        # publishes them to SGLang's runtime context): the options are set in between.
        for k, v in extra.items():
            assert hasattr(args, k), k
            setattr(args, k, v)
        return port_args(args, *a, **kw)

    def process_input_requests(self, recv_reqs, *a, **kw):
        for obj in recv_reqs:
            obj.priority = prio[obj.rid]
        return intake(self, recv_reqs, *a, **kw)

    server_args.PortArgs.init_new = staticmethod(init_new)
    Scheduler.process_input_requests = process_input_requests
    try:
        return tool.main([mine.trace, *rest])
    finally:
        server_args.PortArgs.init_new = staticmethod(port_args)
        Scheduler.process_input_requests = intake


if __name__ == "__main__":
    sys.exit(main())
