#!/usr/bin/env python3
"""How far a client of ``servesim serve`` sees from the simulated latencies, at N concurrent streams.

    python benchmarks/serve_overhead.py [--streams 100] [--requests 500] [--max-tokens 64] [--speedup 1]
                                        [--client-procs 1] [--timeline]

Starts ``servesim serve`` as a subprocess (default engine: vLLM, polynomial timing) and keeps
``--streams`` raw-HTTP streaming completions in flight until ``--requests`` have finished, each
stream on its own kept-alive connection (``--new-connections``: a connection per request). Every
request has a different prompt length, so each client-side measurement is matched to the
server's per-request record of the same request. Prints, over all requests, the client's TTFT
(first chunk minus send) and ITL (gaps between chunks) beside the simulated ones (converted to
wall ms by the speedup) and the per-request differences (client minus simulated). Positive
differences are the server's and the client's overhead; the target is a few ms. A stream more
than 16 passes behind gets its backlog in one chunk; such streams are counted and left out of
the ITL pairs.

``--client-procs K`` splits the streams over K client processes (the client is Python too and
shares the machine's cores with the server). ``--timeline`` has the server record each
request's way through it (servesim_serve.timeline) and splits the mean TTFT difference into:
client send to the server's receipt, the first token's pass end to the driver's wake-up
(timer lateness), the wake-up to the chunk's write (server work), and the write to the
client's read.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import multiprocessing
import os
import re
import resource
import signal
import subprocess
import sys
import tempfile
import time

import numpy as np

SERVESIM = os.environ.get("SERVESIM_CMD", "").split() or [
    sys.executable, "-c", "import sys; from servesim.cli.main import main; sys.exit(main())"]


def request_bytes(prompt_len: int, max_tokens: int) -> bytes:
    """The HTTP request of one streaming completion (built before the clients start)."""
    body = json.dumps({"prompt": list(range(4, 4 + prompt_len)), "max_tokens": max_tokens,
                       "stream": True}).encode()
    return (b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
            b"Content-Length: %d\r\n\r\n%s" % (len(body), body))


async def stream(conn: tuple[asyncio.StreamReader, asyncio.StreamWriter],
                 request: bytes) -> tuple[float, list[float], float]:
    """One streaming completion on an open connection, read to the end of its response;
    returns (TTFT, chunk gaps, send time) in wall ms (the send time on the monotonic clock,
    which the server's event loop also reads)."""
    reader, writer = conn
    sent = time.monotonic()
    writer.write(request)
    times: list[float] = []
    tail = b""  # the end of the previous read, shorter than a chunk's opening
    while True:
        data = await reader.read(1 << 20)
        if not data:
            raise ConnectionError("the server closed the connection")
        now = time.monotonic()
        seen = tail + data
        times.extend([now] * seen.count(b"data: {"))  # chunks that began in this read
        if seen.endswith(b"\r\n0\r\n\r\n"):  # the chunked body's end: the connection is free
            break
        tail = seen[-7:]
    ms = [1000.0 * (t - sent) for t in times]
    return ms[0], [b - a for a, b in zip(ms, ms[1:], strict=False)], 1000.0 * sent


async def drive(host: str, port: int, lengths: list[int], streams: int, max_tokens: int,
                keep_alive: bool) -> dict[int, tuple]:
    """``streams`` clients, each sending its next request when its previous one has ended, on
    one kept-alive connection (as benchmark clients' connection pools do) or on a new one."""
    requests = {n: request_bytes(n, max_tokens) for n in lengths}
    prompts = iter(lengths)
    out: dict[int, tuple] = {}

    async def client() -> None:
        conn = None
        for prompt_len in prompts:
            if conn is None:
                conn = await asyncio.open_connection(host, port, limit=1 << 26)  # merged backlogs
            out[prompt_len] = await stream(conn, requests.pop(prompt_len))
            if not keep_alive:
                conn[1].close()
                conn = None
        if conn is not None:
            conn[1].close()

    await asyncio.gather(*(client() for _ in range(streams)))
    return out


def client_process(conn: multiprocessing.connection.Connection, port: int, lengths: list[int],
                   streams: int, args: argparse.Namespace) -> None:
    """One client process: its share of the streams; sends back its results and CPU time."""
    out = asyncio.run(drive("127.0.0.1", port, lengths, streams, args.max_tokens, not args.new_connections))
    me = resource.getrusage(resource.RUSAGE_SELF)
    conn.send((out, me.ru_utime + me.ru_stime))
    conn.close()


def run_clients(args: argparse.Namespace, port: int) -> tuple[dict[int, tuple], float]:
    """Every stream's results, and the clients' CPU seconds."""
    lengths = list(range(100, 100 + args.requests))
    k = args.client_procs
    if k <= 1:
        out = asyncio.run(drive("127.0.0.1", port, lengths, args.streams, args.max_tokens,
                                not args.new_connections))
        me = resource.getrusage(resource.RUSAGE_SELF)
        return out, me.ru_utime + me.ru_stime
    ctx = multiprocessing.get_context("fork")
    pipes, procs = [], []
    for i in range(k):
        mine, theirs = ctx.Pipe(duplex=False)
        p = ctx.Process(target=client_process, args=(theirs, port, lengths[i::k],
                                                     args.streams // k + (i < args.streams % k), args))
        p.start()
        pipes.append(mine)
        procs.append(p)
    out, cpu = {}, 0.0
    for mine, p in zip(pipes, procs, strict=True):
        part, seconds = mine.recv()
        out.update(part)
        cpu += seconds
        p.join()
    return out, cpu


def start_server(args: argparse.Namespace, per_request: str,
                 timeline: str | None) -> tuple[subprocess.Popen, int]:
    cmd = [*SERVESIM, "serve", "--port", "0", "--set", f"serve.speedup={args.speedup}",
           "--set", f"report.per_request={per_request}"]
    for extra in args.set:
        cmd += ["--set", extra]
    env = dict(os.environ)
    if timeline:
        env["SERVESIM_SERVE_TIMELINE"] = timeline
    proc = subprocess.Popen(cmd, stderr=subprocess.PIPE, stdout=subprocess.DEVNULL, text=True, env=env)
    assert proc.stderr is not None
    line = proc.stderr.readline()
    m = re.search(r"http://[^:]+:(\d+)", line)
    if not m:
        proc.kill()
        raise SystemExit(f"the server did not start: {line}{proc.stderr.read()}")
    return proc, int(m.group(1))


def row(name: str, client: np.ndarray, sim: np.ndarray) -> str:
    if not len(client):
        return f"{name:<5} no pairs"
    diff = client - sim
    return (f"{name:<5} client mean {client.mean():8.2f} p50 {np.median(client):8.2f} | simulated mean "
            f"{sim.mean():8.2f} p50 {np.median(sim):8.2f} | difference mean {diff.mean():6.2f} "
            f"p50 {np.median(diff):6.2f} p90 {np.percentile(diff, 90):6.2f} "
            f"p99 {np.percentile(diff, 99):6.2f}")


def breakdown(timeline: list[dict], client: dict[int, tuple], records: dict[int, dict],
              speedup: float) -> str:
    """The mean TTFT difference split at the server's timeline (wall ms): client send to the
    receipt, the pass end to the driver's wake-up, the wake-up to the first chunk's write, the
    write to the client's read; plus the receipt to the handler and the handler's own work
    (inside the simulated TTFT: the arrival is the receipt), and the timers' lateness."""
    *rows, tail = timeline
    origin = tail["origin"]
    parts: dict[str, list[float]] = {k: [] for k in ("send", "timer", "work", "read", "hop", "admit", "late")}
    for r in rows:
        plen = r["prompt_len"]
        if plen not in client or "woke" not in r or "written" not in r:
            continue
        ttft, _gaps, sent = client[plen]
        read = sent + ttft  # ms
        first_wall = 1000.0 * origin + records[plen]["token_times_ms"][0] / speedup
        parts["send"].append(1000.0 * r["received"] - sent)
        parts["timer"].append(1000.0 * r["woke"] - first_wall)
        parts["work"].append(1000.0 * (r["written"] - r["woke"]))
        parts["read"].append(read - 1000.0 * r["written"])
        parts["hop"].append(1000.0 * (r["handled"] - r["received"]))
        parts["admit"].append(1000.0 * (r["submitted"] - r["handled"]))
        parts["late"].append((r["engine_ms"] - r["arrival_ms"]) / speedup)
    m = {k: (np.mean(v) if v else float("nan")) for k, v in parts.items()}
    p99 = {k: (np.percentile(v, 99) if v else float("nan")) for k, v in parts.items()}
    timers = 1000.0 * np.array(tail["timers"])
    total = m["send"] + m["timer"] + m["work"] + m["read"]
    return (f"      timeline, mean (p99) ms: send to receipt {m['send']:.2f} ({p99['send']:.2f}) + "
            f"pass end to wake-up {m['timer']:.2f} ({p99['timer']:.2f}) + wake-up to write {m['work']:.2f} "
            f"({p99['work']:.2f}) + write to read {m['read']:.2f} ({p99['read']:.2f}) = {total:.2f}\n"
            f"      inside the simulated TTFT: receipt to handler {m['hop']:.2f} ({p99['hop']:.2f}), "
            f"handler {m['admit']:.3f} ({p99['admit']:.3f}), engine submission after the arrival "
            f"{m['late']:.2f} ({p99['late']:.2f}); driver timers late mean {timers.mean():.2f} "
            f"p50 {np.median(timers):.2f} p99 {np.percentile(timers, 99):.2f} ({len(timers)})")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--streams", type=int, default=100)
    ap.add_argument("--requests", type=int, default=500)
    ap.add_argument("--max-tokens", type=int, default=64)
    ap.add_argument("--speedup", type=float, default=1.0)
    ap.add_argument("--new-connections", action="store_true",
                    help="open a connection per request (default: each stream keeps its own)")
    ap.add_argument("--set", action="append", default=[], help="extra --set for the server")
    ap.add_argument("--client-procs", type=int, default=1,
                    help="client processes the streams are split over (default 1: this one)")
    ap.add_argument("--timeline", action="store_true",
                    help="the server records each request's times; split the TTFT difference")
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        per_request = os.path.join(tmp, "requests.jsonl")
        timeline_path = os.path.join(tmp, "timeline.jsonl") if args.timeline else None
        proc, port = start_server(args, per_request, timeline_path)
        try:
            t0 = time.perf_counter()
            client, client_cpu = run_clients(args, port)
            wall = time.perf_counter() - t0
        finally:
            proc.send_signal(signal.SIGINT)
            proc.wait(timeout=60)
        cpu = resource.getrusage(resource.RUSAGE_CHILDREN)  # the server and any client processes
        records = {r["input_length"]: r for r in map(json.loads, open(per_request))}
        timeline = list(map(json.loads, open(timeline_path))) if timeline_path else None
    c_ttft, s_ttft, c_itl, s_itl, offsets = [], [], [], [], []
    merged = chunks = 0
    for plen, (ttft, gaps, sent) in client.items():
        chunks += len(gaps) + 1
        rec = records[plen]
        times = [t / args.speedup for t in rec["token_times_ms"]]
        c_ttft.append(ttft)
        s_ttft.append(times[0] - rec["arrival_ms"] / args.speedup)
        offsets.append(sent - rec["arrival_ms"] / args.speedup)
        if len(gaps) != len(times) - 1:
            merged += 1  # a stream that fell behind got a backlog in one chunk: no gap pairs
            continue
        c_itl.extend(gaps)
        s_itl.extend(b - a for a, b in zip(times, times[1:], strict=False))
    print(f"{args.requests} requests, {args.streams} concurrent streams, {args.max_tokens} tokens each, "
          f"{'a connection per request' if args.new_connections else 'kept-alive connections'}, "
          f"speedup {args.speedup:g}, {args.client_procs} client process(es): {wall:.1f} s wall; "
          f"latencies in wall ms")
    print(row("TTFT", np.array(c_ttft), np.array(s_ttft)))
    # Where the TTFT difference goes. The server's simulated time 0 falls at some monotonic
    # wall time O; a request sent at s_i and received (its simulated arrival a_i) at O + a_i
    # waited O + a_i - s_i >= 0 before the server had it, so O >= max(s_i - a_i). Taking O at
    # that bound makes the least-delayed request's wait 0 (an idle server's, well under 1 ms)
    # and splits each difference into the wait before the server received the request and
    # the rest: from the first token's pass end to the client's read.
    waits = max(offsets) - np.array(offsets)
    rest = np.array(c_ttft) - np.array(s_ttft) - waits
    print(f"      of the TTFT difference: before the server received the request mean {waits.mean():.2f} "
          f"p50 {np.median(waits):.2f} p99 {np.percentile(waits, 99):.2f}; pass end to the client's read "
          f"mean {rest.mean():.2f} p50 {np.median(rest):.2f} p99 {np.percentile(rest, 99):.2f}")
    if timeline is not None:
        print(breakdown(timeline, client, records, args.speedup))
    print(row("ITL", np.array(c_itl), np.array(s_itl)))
    print(f"streams that fell behind (backlog merged into one chunk, left out of ITL): {merged}")
    server_cpu = cpu.ru_utime + cpu.ru_stime - (client_cpu if args.client_procs > 1 else 0.0)
    print(f"server CPU (user+sys, start-up and report included): {server_cpu:.2f} s, "
          f"{1e6 * server_cpu / max(chunks, 1):.0f} us per chunk sent ({chunks} chunks); client CPU "
          f"{client_cpu:.2f} s; load average {os.getloadavg()[0]:.1f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
