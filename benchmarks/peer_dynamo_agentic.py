#!/usr/bin/env python3
"""The reference peer (``peer_dynamo.py``, Dynamo 1.6.1's offline replay) with the agentic
replay keys it does not pass on: ``execution_model`` (required by ``agentic_mooncake`` and
``weka``), ``agentic_lanes`` and ``weka_nested_timestamp_basis``.

    peer_dynamo_agentic.py TRACE --set trace_format='"weka"' --set execution_model='"m"' ...

Everything else is ``peer_dynamo.py``'s (its ``--help``). Its location: $PEER_DYNAMO_TOOL
(default /work/shared/tools/peer_dynamo.py); its Python: $PEER_DYNAMO_PYTHON (default
~/.cache/servesim-peer/bin/python), which this script re-executes itself with when it cannot
import ``dynamo``. Not run by CI: tests/golden/agentic/make_golden.py records its reports.
"""

from __future__ import annotations

import importlib.util
import os
import sys

TOOL = os.environ.get("PEER_DYNAMO_TOOL", "/work/shared/tools/peer_dynamo.py")
PY = os.environ.get("PEER_DYNAMO_PYTHON", os.path.expanduser("~/.cache/servesim-peer/bin/python"))
EXTRA_KEYS = {"execution_model", "agentic_lanes", "weka_nested_timestamp_basis"}


def main() -> None:
    try:
        import dynamo._core  # noqa: F401
    except ImportError:
        if os.environ.get("_PEER_AGENTIC_REEXEC") or not os.path.exists(PY):
            raise SystemExit(f"cannot import dynamo with {sys.executable}; build the peer venv") from None
        os.environ["_PEER_AGENTIC_REEXEC"] = "1"
        os.execv(PY, [PY, os.path.abspath(__file__), *sys.argv[1:]])
    spec = importlib.util.spec_from_file_location("peer_dynamo", TOOL)
    assert spec is not None and spec.loader is not None
    peer = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(peer)
    peer.REPLAY_KEYS |= EXTRA_KEYS
    peer.main()


if __name__ == "__main__":
    main()
