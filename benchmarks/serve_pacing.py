#!/usr/bin/env python3
"""Draw how ``servesim serve`` paces tokens: simulated pass ends against what a client receives.

    python benchmarks/serve_pacing.py [--out docs/serve-pacing.png] [--speedup 1]

Starts a server in this process (one vLLM worker, prefill 30 ms and decode 8 ms per pass, fixed
timing), sends four streaming requests 20 wall ms apart and plots, per request, the simulated
time of every token (divided by the speedup, on the wall axis) and the moment the client read
its chunk. Needs matplotlib.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import time
from pathlib import Path

from servesim_serve.testing import running

REQUESTS, GAP_MS, TOKENS = 4, 20.0, 10


async def stream(port: int, delay_s: float, prompt_len: int) -> list[float]:
    await asyncio.sleep(delay_s)
    body = json.dumps({"prompt": list(range(4, 4 + prompt_len)), "max_tokens": TOKENS,
                       "stream": True}).encode()
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    writer.write(b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                 b"Content-Length: %d\r\n\r\n%s" % (len(body), body))
    got = []
    while True:
        line = await reader.readline()
        if not line or line.startswith(b"data: [DONE]"):
            break
        if line.startswith(b"data: {"):
            got.append(time.monotonic())
    writer.close()
    return got


async def drive(port: int) -> list[list[float]]:
    return await asyncio.gather(*(stream(port, i * GAP_MS / 1000.0, 100 + i) for i in range(REQUESTS)))


def main() -> int:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", type=Path, default=Path("docs/serve-pacing.png"))
    ap.add_argument("--speedup", type=float, default=1.0)
    args = ap.parse_args()
    sets = ["engine.timing_model={type: fixed, prefill_ms: 30.0, decode_ms: 8.0}",
            f"serve.speedup={args.speedup}"]
    with running(sets) as s:
        port = int(s.url.rsplit(":", 1)[1])
        received = asyncio.run(drive(port))
        clock = s.server.driver.clock
        requests = sorted(s.server.driver.requests, key=lambda r: r.prompt_len)
        wall0 = clock.wall_at(requests[0].arrival)
    fig, ax = plt.subplots(figsize=(9, 3.6))
    for i, (req, got) in enumerate(zip(requests, received, strict=True)):
        sim = [1000.0 * (clock.wall_at(t) - wall0) for t in req.times]
        client = [1000.0 * (t - wall0) for t in got]
        arrival = 1000.0 * (clock.wall_at(req.arrival) - wall0)
        ax.plot([arrival], [i], marker=">", color="black", ms=7, label="arrival" if i == 0 else None)
        ax.plot(sim, [i + 0.12] * len(sim), "|", color="tab:blue", ms=14, mew=2,
                label="simulated pass end (÷ speedup)" if i == 0 else None)
        ax.plot(client, [i - 0.12] * len(client), ".", color="tab:orange", ms=7,
                label="chunk read by the client" if i == 0 else None)
    ax.set_yticks(range(REQUESTS), [f"request {i}" for i in range(REQUESTS)])
    ax.set_xlabel("wall ms since the first arrival")
    ax.set_ylim(REQUESTS - 0.4, -0.6)
    ax.set_title("servesim serve: tokens leave when their simulated pass ends "
                 f"(prefill 30 ms, decode 8 ms, speedup {args.speedup:g})", fontsize=10)
    ax.grid(axis="x", alpha=0.3)
    ax.legend(loc="lower left", fontsize=8)
    fig.tight_layout()
    fig.savefig(args.out, dpi=120)
    print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
