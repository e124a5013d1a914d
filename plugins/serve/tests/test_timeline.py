"""The overhead benchmark's opt-in request timeline (SERVESIM_SERVE_TIMELINE): one record per
request, its moments in order, joined to the request's simulated times."""

from __future__ import annotations

import json
from pathlib import Path

import httpx
import pytest
from servesim_serve.testing import running
from servesim_serve.timeline import ENV, Timeline, install

FIXED = ["engine.timing_model={type: fixed, prefill_ms: 10.0, decode_ms: 2.0}", "serve.speedup=20"]


def test_nothing_is_wrapped_without_the_variable(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(ENV, raising=False)
    with running(FIXED) as s:
        assert install(s.server) is None
        assert "_admit" not in vars(s.server) and "_complete" not in vars(s.server.driver)


def test_a_streamed_request_s_moments_are_in_order(tmp_path: Path) -> None:
    body = {"prompt": list(range(4, 40)), "max_tokens": 4, "stream": True}
    with running(FIXED) as s:
        timeline = Timeline(s.server)  # before any request: no timer is armed yet
        text = httpx.post(s.base + "/completions", json=body, timeout=30).text
        (req,) = s.server.driver.requests
        clock = s.server.driver.clock
        path = tmp_path / "timeline.jsonl"
        timeline.write(str(path))
    assert text.endswith("data: [DONE]\n\n")
    row, tail = [json.loads(line) for line in path.read_text().splitlines()]
    assert row["prompt_len"] == 36 and row["arrival_ms"] == req.arrival
    assert row["engine_ms"] >= row["arrival_ms"] and row["first_ms"] == req.times[0]
    assert row["received"] <= row["handled"] <= row["submitted"] <= row["woke"] <= row["written"]
    assert row["received"] == pytest.approx(clock.wall_at(req.arrival), abs=1e-9)
    assert row["woke"] >= clock.wall_at(req.times[0])  # a pass is completed at its end or later
    assert tail["origin"] == clock.wall_at(0.0)
    # one per timer that ended passes (a late one ends every pass due by then), none early
    assert 1 <= len(tail["timers"]) <= 4 and min(tail["timers"]) >= 0.0
