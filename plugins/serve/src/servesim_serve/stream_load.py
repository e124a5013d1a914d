"""Many concurrent streams against a running server, some of their clients leaving early, with
``/metrics`` scraped throughout: the load of ``plugins/serve/tests/test_metrics_load.py`` and
``benchmarks/serve_streams.py``.

A plan is ``(prompt token ids, max_tokens, leave_after)``: the client streams a completion over
a raw HTTP/1.1 connection and reads to ``[DONE]``, or (``leave_after`` set) closes the socket
after that many chunks. A leaver asks for far more tokens than it could get before it leaves,
so its request is certain to be cancelled, whatever the machine's speed. The first leaver to
reach its last chunk scrapes ``/metrics`` before it closes: one scrape is certain to find a
request in flight. :class:`RenderLog` records, on the server's side, each ``/metrics`` body with
the requests submitted and not rejected at that moment (both read in one go on the server's
event loop), which :func:`families` and :func:`imbalance` check: started = finished +
cancelled + running + waiting.
"""

from __future__ import annotations

import asyncio
import json
import random
import re
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from servesim_serve.app import Server

Plan = tuple[list[int], int, "int | None"]
# The far too many tokens a leaver asks for.
LEAVER_TOKENS = 100_000
_SAMPLE = re.compile(r'^([a-z_:]+)\{([^}]*)\} (\S+)$')
_FAMILIES = {"vllm:num_requests_running": "running", "vllm:num_requests_waiting": "waiting",
             "vllm:kv_cache_usage_perc": "kv"}


def make_plans(n: int, leave_fraction: float, seed: int, tokens: tuple[int, int] = (1, 12)) -> list[Plan]:
    """``n`` seeded plans: prompts sharing 64-token prefixes (8 of them) plus 1 to 99 random
    tokens; a ``leave_fraction`` of the clients leave after 1 to 3 chunks, the rest ask for
    ``tokens[0]`` to ``tokens[1] - 1`` tokens and read them all."""
    rng = random.Random(seed)
    plans: list[Plan] = []
    for _ in range(n):
        prompt = [4 + rng.randrange(8)] * 64 + [rng.randrange(4, 1000) for _ in range(rng.randrange(1, 100))]
        if rng.random() < leave_fraction:
            plans.append((prompt, LEAVER_TOKENS, rng.randrange(1, 4)))
        else:
            plans.append((prompt, rng.randrange(*tokens), None))
    return plans


async def _get_metrics(host: str, port: int) -> bytes:
    reader, writer = await asyncio.open_connection(host, port, limit=1 << 26)
    try:
        writer.write(b"GET /metrics HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
        head = await reader.readuntil(b"\r\n\r\n")
        assert head.startswith(b"HTTP/1.1 200"), head
        return await reader.read()
    finally:
        writer.close()


async def stream_one(host: str, port: int, plan: Plan, first_leaver: asyncio.Event | None = None) -> int:
    """One stream; returns the output tokens received (a built-in-tokenizer token is a word).
    With ``first_leaver``, the first leaver to reach its last chunk sets it and scrapes
    ``/metrics`` before it leaves."""
    prompt, max_tokens, leave_after = plan
    body = json.dumps({"prompt": prompt, "max_tokens": max_tokens, "stream": True}).encode()
    # A stream far behind (a crowded machine) gets its backlog as one long line.
    reader, writer = await asyncio.open_connection(host, port, limit=1 << 26)
    writer.write(b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                 b"Content-Length: %d\r\n\r\n%s" % (len(body), body))
    words = chunks = 0
    try:
        status = await reader.readline()
        assert status.startswith(b"HTTP/1.1 200"), status
        while True:
            line = await reader.readline()
            assert line, "the stream ended before [DONE]"
            if line.startswith(b"data: {"):
                chunks += 1
                words += len(json.loads(line[6:])["choices"][0]["text"].split())
                if leave_after is not None and chunks >= leave_after:
                    if first_leaver is not None and not first_leaver.is_set():
                        first_leaver.set()
                        await _get_metrics(host, port)  # this request is surely in flight
                    break
            elif line.startswith(b"data: [DONE]"):
                break
    finally:
        writer.close()
    return words


async def drive(url: str, plans: list[Plan], in_flight: int, scrape_pause_s: float = 0.0,
                max_scrapes: int = 1_000_000) -> tuple[list[int], int]:
    """Run every plan, at most ``in_flight`` streams at once, while a scraper reads
    ``/metrics`` (a pause of ``scrape_pause_s`` between scrapes, at most ``max_scrapes``) until
    the last stream is done. Returns the tokens each stream received and the scrapes made."""
    host, port_text = url.split("//")[1].split(":")
    port = int(port_text)
    gate = asyncio.Semaphore(in_flight)
    first_leaver = asyncio.Event()
    done = asyncio.Event()

    async def bounded(plan: Plan) -> int:
        async with gate:
            return await stream_one(host, port, plan, first_leaver)

    async def scraper() -> int:
        count = 0
        reader, writer = await asyncio.open_connection(host, port, limit=1 << 26)
        try:
            while not done.is_set() and count < max_scrapes:
                writer.write(b"GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n")  # one kept-alive connection
                head = await reader.readuntil(b"\r\n\r\n")
                assert head.startswith(b"HTTP/1.1 200"), head
                length = re.search(rb"(?i)content-length: *(\d+)", head)
                assert length is not None, head
                await reader.readexactly(int(length.group(1)))
                count += 1
                await asyncio.sleep(scrape_pause_s)
        finally:
            writer.close()
        return count

    scraping = asyncio.ensure_future(scraper())
    try:
        got = await asyncio.gather(*(bounded(p) for p in plans))
    finally:
        done.set()
    return list(got), await scraping


class RenderLog:
    """Each ``/metrics`` body the server renders, with the requests submitted to its engines
    and not rejected at that moment (``entries``: ``(started, body)``)."""

    def __init__(self, server: Server) -> None:
        self.entries: list[tuple[int, bytes]] = []
        observer, driver = server.observer, server.driver
        render = observer.render

        def logged() -> bytes:
            body = render()
            # A request is known rejected once it has ended (a split's decode pool may reject it
            # after its prefill): until then it is in flight, and /metrics counts it so.
            self.entries.append((sum(1 for r in driver.requests if not r.rejected), body))
            return body

        observer.render = logged  # type: ignore[method-assign]


def families(text: str) -> dict[str, float]:
    """Sums over the engines: ``finished`` (``vllm:request_success_total`` but aborts),
    ``cancelled`` (its ``finished_reason="abort"``), ``running``, ``waiting``, ``kv`` (usage)."""
    out = {"finished": 0.0, "cancelled": 0.0, "running": 0.0, "waiting": 0.0, "kv": 0.0}
    for line in text.splitlines():
        m = _SAMPLE.match(line)
        if m is None:
            continue
        name, labels, value = m.group(1), m.group(2), float(m.group(3))
        if name == "vllm:request_success_total":
            out["cancelled" if 'finished_reason="abort"' in labels else "finished"] += value
            continue
        key = _FAMILIES.get(name)
        if key is not None:
            out[key] += value
    return out


def imbalance(started: int, text: str) -> float:
    """started - (finished + cancelled + running + waiting) of one scrape (0 when it balances)."""
    f = families(text)
    return started - (f["finished"] + f["cancelled"] + f["running"] + f["waiting"])


def summary(entries: list[tuple[int, bytes]]) -> dict[str, Any]:
    """Scrapes, those that did not balance, the largest imbalance, and the scrapes that found
    requests in flight."""
    gaps = []
    busy = 0
    for started, body in entries:
        f = families(body.decode())
        gaps.append(started - (f["finished"] + f["cancelled"] + f["running"] + f["waiting"]))
        busy += f["running"] + f["waiting"] > 0
    return {"scrapes": len(entries), "unbalanced": sum(1 for g in gaps if g != 0),
            "max_imbalance": max((abs(g) for g in gaps), default=0.0), "busy_scrapes": busy}
