"""Hypothesis strategies for backend tests (needs ``hypothesis``, a test-only dependency)."""

from __future__ import annotations

import json
from typing import Any

from hypothesis import strategies as st


@st.composite
def mooncake_lines(draw: Any, max_requests: int = 14) -> list[str]:
    """Small Mooncake JSONL traces: a shared first block from a few ids, then unique blocks,
    bursty timestamps, and optionally multi-turn sessions with inter-turn delays."""
    n = draw(st.integers(1, max_requests))
    sessions = draw(st.booleans())
    lines = []
    seen: set[str] = set()
    t = 0
    for i in range(n):
        t += draw(st.sampled_from([0, 1, 7, 30, 90]))
        rec: dict[str, Any] = {
            "timestamp": t,
            "hash_ids": [draw(st.integers(0, 3))]
            + [100 + i * 10 + j for j in range(draw(st.integers(0, 4)))],
            "output_length": draw(st.integers(1, 40)),
        }
        if sessions:
            sid = f"s{draw(st.integers(0, 3))}"
            rec["session_id"] = sid
            if sid in seen and draw(st.booleans()):
                rec["delay"] = draw(st.sampled_from([0, 5, 20]))
            seen.add(sid)
        lines.append(json.dumps(rec))
    return lines
