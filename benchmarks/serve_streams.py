#!/usr/bin/env python3
"""Does ``servesim serve``'s ``/metrics`` balance at every scrape while it holds 1,000 concurrent
streams, 30 % of whose clients leave after a few chunks?

    python benchmarks/serve_streams.py [--streams 1000] [--leave 0.3] [--seed 46] [--modes aggregated split]
                                       [--scrape-pause 0.01]

For each mode (aggregated: 2 workers behind the ``kv`` router; split: 2 prefill and 2 decode
workers with a 200 ms KV transfer) it starts a server in this process
(``servesim_serve.testing.running``), opens every stream at once (``servesim_serve.stream_load``:
raw HTTP/1.1 streaming completions; a leaver asks for 100,000 tokens and closes its socket after
1 to 3 chunks) while one client scrapes ``/metrics`` over a kept-alive connection,
``--scrape-pause`` seconds between scrapes (a leaver's request runs until its client has read
its chunks and left: a server kept busy rendering falls behind, and its leavers cost it more).
The server records each body it renders with the requests submitted and not rejected at that
moment. Prints per mode: the streams and leavers, the scrapes, those that did
not balance (started = finished + cancelled + running + waiting, over vLLM's
``request_success_total`` by ``finished_reason`` and the scheduler gauges) and the largest
imbalance, the scrapes that found requests in flight and the most requests in flight one saw,
the gauges once idle, whether the report's counts agree with what the clients saw, and the wall
time of the load. Exit status 1 if anything did not hold.
"""

from __future__ import annotations

import argparse
import asyncio
import sys
import time

from servesim_serve.stream_load import LEAVER_TOKENS, RenderLog, drive, families, make_plans, summary
from servesim_serve.testing import running

# 20 wall ms per pass (a server in one Python process with its 1,000 clients keeps up), the
# stayers' 40 to 79 tokens a second or more: every stream is open at once; a pool large enough
# for all of them.
TOKENS = (40, 80)
LOAD = ["engine.timing_model={type: fixed, prefill_ms: 20.0, decode_ms: 20.0}", "serve.speedup=1",
        "engine.num_gpu_blocks=32768"]
MODES = {
    "aggregated": [*LOAD, "cluster.workers=2", "cluster.router=kv"],
    "split": [*LOAD, "cluster.prefill_workers=2", "cluster.decode_workers=2",
              "cluster.handoff_latency_ms=200"],
}
IDLE_TIMEOUT_S = 60.0


def run_mode(mode: str, streams: int, leave: float, seed: int, pause_s: float) -> bool:
    plans = make_plans(streams, leave, seed, TOKENS)
    leavers = [i for i, p in enumerate(plans) if p[2] is not None]
    stayers = [i for i, p in enumerate(plans) if p[2] is None]
    with running(MODES[mode]) as s:
        log = RenderLog(s.server)
        t0 = time.perf_counter()
        got, _ = asyncio.run(drive(s.url, plans, in_flight=streams, scrape_pause_s=pause_s))
        wall = time.perf_counter() - t0
        driver = s.server.driver
        deadline = time.monotonic() + IDLE_TIMEOUT_S
        while driver.in_flight or driver._heap or any(e.pass_in_flight for e in driver.engines):
            if time.monotonic() > deadline:
                print(f"{mode}: the server did not go idle within {IDLE_TIMEOUT_S:.0f} s")
                return False
            time.sleep(0.01)
        report = s.server.report()
        idle = families(s.server.observer.render().decode())
    figures = summary(log.entries)
    seen = [families(body.decode()) for _started, body in log.entries]
    most = max((f["running"] + f["waiting"] for f in seen), default=0)
    idle_ok = idle == {"finished": float(len(stayers)), "cancelled": float(len(leavers)),
                       "running": 0.0, "waiting": 0.0, "kv": 0.0}
    clients_ok = ([got[i] for i in stayers] == [plans[i][1] for i in stayers]
                  and all(1 <= got[i] < LEAVER_TOKENS for i in leavers))
    report_ok = ((report["num_requests"], report["completed"], report["failed"], report["num_cancelled"],
                  report["num_unfinished"], report["total_output_tokens"])
                 == (streams, len(stayers), len(leavers), len(leavers), 0, sum(plans[i][1] for i in stayers)))
    print(f"{mode:>10}: {streams} streams, {len(leavers)} leavers; {figures['scrapes']} scrapes, "
          f"{figures['unbalanced']} unbalanced, max imbalance {figures['max_imbalance']:g}; "
          f"{figures['busy_scrapes']} found requests in flight (at most {most:g}); "
          f"idle gauges {'0' if idle_ok else idle}; clients {'ok' if clients_ok else 'DIFFER'}; "
          f"report {'agrees' if report_ok else 'DIFFERS'}; "
          f"load wall {wall:.2f} s, simulated {report['duration']:.2f} s")
    return figures["unbalanced"] == 0 and idle_ok and clients_ok and report_ok


def main() -> int:
    ap = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    ap.add_argument("--streams", type=int, default=1000)
    ap.add_argument("--leave", type=float, default=0.3)
    ap.add_argument("--seed", type=int, default=46)
    ap.add_argument("--modes", nargs="+", choices=sorted(MODES), default=sorted(MODES))
    ap.add_argument("--scrape-pause", type=float, default=0.01, help="seconds between scrapes")
    args = ap.parse_args()
    ok = True
    for mode in args.modes:
        ok = run_mode(mode, args.streams, args.leave, args.seed, args.scrape_pause) and ok
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
