"""The agentic trace formats against the reference, case by case, from the recorded reports.

    python benchmarks/agentic_fidelity.py

Replays every case of tests/golden/agentic (the reference's reports, recorded by its
``make_golden.py`` through ``peer_dynamo_agentic.py``) through servesim and prints, per case,
the requests compared, the largest difference of arrival and completion times, how many
requests agree exactly (both within 2 us, the reference's rounding) and the reference's
readmissions. Needs no reference; the tests assert the same agreement.
"""

from __future__ import annotations

import json
import sys
import tempfile
from pathlib import Path

from servesim.config.loader import load_config
from servesim.plugins import Plugins
from servesim.replay.runner import simulate
from servesim.report.summary import per_request_lines

GOLDEN = Path(__file__).resolve().parents[1] / "tests" / "golden" / "agentic"
TOL_MS = 2e-3


def replay(expected: dict, tmp: Path) -> dict[int, dict]:
    cfg = tmp / "c.yaml"
    engine = ", ".join(f"{k}: {v}" for k, v in expected["engine"].items())
    cfg.write_text(f"engine: {{{engine}}}\nworkload:\n  trace: {{path: {GOLDEN / expected['trace']}, "
                   f"format: {expected['format']}}}\n")
    res = simulate(load_config(str(cfg), list(expected["servesim_sets"]), Plugins()))
    return {r["request_id"]: r for r in map(json.loads, per_request_lines(res.log, res.session_ids))}


def main() -> int:
    print(f"{'case':34s} {'format':22s} {'requests':>8s} {'max |dev| ms':>13s} {'exact':>6s} {'readm.':>6s}")
    total = exact_total = 0
    for path in sorted(GOLDEN.glob("*.expected.json")):
        expected = json.loads(path.read_text())
        with tempfile.TemporaryDirectory() as tmp:
            got = replay(expected, Path(tmp))
        dev, exact = 0.0, 0
        for want in expected["requests"]:
            g = got[want["node"]]
            d = max(abs(g["arrival_ms"] - want["arrival_time_ms"]),
                    abs(g["completion_ms"] - want["terminal_time_ms"]))
            dev = max(dev, d)
            exact += d <= TOL_MS
        n = len(expected["requests"])
        total += n
        exact_total += exact
        readm = sum(max(0, w["admissions"] - 1) for w in expected["requests"])
        print(f"{path.name.removesuffix('.expected.json'):34s} {expected['format']:22s} {n:8d} "
              f"{dev:13.2e} {exact:6d} {readm:6d}")
    print(f"{'all':34s} {'':22s} {total:8d} {'':13s} {exact_total:6d}")
    return 0 if exact_total == total else 1


if __name__ == "__main__":
    sys.exit(main())
