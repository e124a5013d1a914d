"""Run Dynamo 1.6.1's planner-in-the-loop replay and record what its planner saw and decided.

    PYTHON=/path/to/venv-with-ai-dynamo-and-planner-deps/bin/python
    $PYTHON benchmarks/conformance/dynamo_planner_peer.py TRACE.jsonl --config PEER.json \
        --planner PLANNER.json [-o OUT.json]

The reference is ``dynamo.replay.run_trace_replay(..., planner_config=...)`` (ai-dynamo
1.6.1). ``PEER.json`` holds the engine keys of /work/shared/tools/peer_dynamo.py (its
``build_engine_args`` builds the mocker's engine arguments from them). Every call of the
planner adapter's ``on_tick`` is recorded (the snapshot the replay passed and the decision
returned, unchanged), with the replay's summary and the planner's scaling events, as one JSON
object.

The planner package imports ``aisimulate.runner`` at module level (dynamo/replay/config.py),
which the PyPI ``aisimulate`` stub lacks. Only its ``canonical_performance_config`` is named,
and only the ``optimization_target: sla`` bootstrap (an AIS session) calls it, so a stand-in
that refuses the call is installed here; the other planner modes never reach it. Run with
the AIC shim (/work/shared/tools/aic_shim) on ``PYTHONPATH`` so ``aisimulate`` itself imports.
"""

from __future__ import annotations

import argparse
import copy
import json
import os
import sys
import types
from pathlib import Path
from typing import Any

TOOLS = Path(os.environ.get("SERVESIM_PEER_TOOLS", "/work/shared/tools"))


def _install_runner_stand_in() -> None:
    try:
        import aisimulate.runner  # noqa: F401
        return
    except ImportError:
        pass
    import aisimulate

    mod = types.ModuleType("aisimulate.runner")

    def canonical_performance_config(config: Any, *, worker_type: str) -> Any:
        raise RuntimeError("aisimulate.runner is not installed: the planner's "
                           "optimization_target 'sla' (AIS bootstrap) cannot run here")

    mod.canonical_performance_config = canonical_performance_config  # type: ignore[attr-defined]
    sys.modules["aisimulate.runner"] = mod
    aisimulate.runner = mod  # type: ignore[attr-defined]


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("trace")
    ap.add_argument("--config", required=True, help="peer_dynamo.py engine config (JSON)")
    ap.add_argument("--planner", required=True, help="Dynamo PlannerConfig (JSON)")
    ap.add_argument("-o", "--output", help="write the record here (default: stdout)")
    a = ap.parse_args(argv)

    os.environ.setdefault("DYN_LOG", "error")
    sys.path.insert(0, str(TOOLS))
    _install_runner_stand_in()
    import peer_dynamo
    from dynamo.planner.offline.replay_adapter import ReplayPlannerAdapter
    from dynamo.replay import run_trace_replay

    cfg = json.loads(Path(a.config).read_text())
    planner_cfg = json.loads(Path(a.planner).read_text())
    ticks: list[dict[str, Any]] = []
    original = ReplayPlannerAdapter.on_tick

    def recording_on_tick(self: Any, result: dict[str, Any]) -> dict[str, Any]:
        seen = copy.deepcopy(result)
        decision = original(self, result)
        ticks.append({"input": seen, "decision": dict(decision)})
        return decision

    ReplayPlannerAdapter.on_tick = recording_on_tick  # type: ignore[method-assign]
    kwargs = {k: cfg[k] for k in peer_dynamo.REPLAY_KEYS if k in cfg}
    kwargs["extra_engine_args"] = peer_dynamo.build_engine_args(cfg, "aggregated")
    kwargs["num_workers"] = int(cfg.get("num_workers", 1))
    rep = run_trace_replay([os.path.abspath(a.trace)], planner_config=planner_cfg, **kwargs)
    summary = dict(rep.summary)
    planner = rep.planner.to_dict() if rep.planner is not None else None
    out = {
        "summary": peer_dynamo.summarize(summary, 0.0, summary.get("num_requests") or 0),
        "engine_args": kwargs["extra_engine_args"],
        "num_workers": kwargs["num_workers"],
        "planner_config": planner_cfg,
        "ticks": ticks,
        "scaling_events": (planner or {}).get("scaling_events"),
        "planner": planner,
    }
    text = json.dumps(out, indent=1, default=str)
    if a.output:
        Path(a.output).write_text(text + "\n")
    else:
        sys.stdout.write(text + "\n")


if __name__ == "__main__":
    main()
