"""``servesim serve`` as a subprocess: it serves, and SIGINT or SIGTERM writes the report."""

from __future__ import annotations

import json
import os
import re
import selectors
import signal
import subprocess
import sys
import time

import httpx
import pytest

TIMEOUT_S = 30.0
# The console entry point in a fresh interpreter
SERVESIM = [sys.executable, "-c", "import sys; from servesim.cli.main import main; sys.exit(main())"]


def start(tmp_path, *extra: str) -> tuple[subprocess.Popen, str]:
    cmd = [*SERVESIM, "serve", "--port", "0",
           "--set", "engine.timing_model={type: fixed, prefill_ms: 10.0, decode_ms: 2.0}",
           "--set", "serve.speedup=100",
           "--set", f"report.output_json={json.dumps(str(tmp_path / 'report.json'))}",
           "--set", f"report.per_request={json.dumps(str(tmp_path / 'requests.jsonl'))}", *extra]
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    sel = selectors.DefaultSelector()
    sel.register(proc.stderr, selectors.EVENT_READ)
    deadline = time.monotonic() + TIMEOUT_S
    while time.monotonic() < deadline:
        if not sel.select(timeout=deadline - time.monotonic()):
            break
        line = proc.stderr.readline()
        if not line:
            break
        m = re.search(r"on (http://127\.0\.0\.1:\d+)", line)
        if m:
            return proc, m.group(1)
    proc.kill()
    raise AssertionError(f"the server did not start: {proc.stderr.read()}")


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM])
def test_a_signal_writes_the_report(tmp_path, sig) -> None:
    proc, url = start(tmp_path)
    try:
        r = httpx.post(url + "/v1/completions", json={"prompt": "a b c", "max_tokens": 4}, timeout=TIMEOUT_S)
        assert r.json()["usage"]["completion_tokens"] == 4
        proc.send_signal(sig)
        out, err = proc.communicate(timeout=TIMEOUT_S)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 0, err
    assert "Successful requests:" in out and f"report written to {tmp_path / 'report.json'}" in out
    report = json.loads((tmp_path / "report.json").read_text())
    assert (report["num_requests"], report["completed"], report["total_output_tokens"]) == (1, 1, 4)
    assert report["mean_ttft_ms"] == pytest.approx(10.0, abs=1e-6)
    (line,) = (tmp_path / "requests.jsonl").read_text().splitlines()
    assert json.loads(line)["num_output_tokens"] == 4


def test_a_bad_serve_key_is_a_config_error(tmp_path) -> None:
    cfg = tmp_path / "serve.yaml"
    cfg.write_text("serve:\n  speedup: -1\n")
    proc = subprocess.run([*SERVESIM, "serve", str(cfg)], capture_output=True,
                          text=True, timeout=TIMEOUT_S, env={**os.environ})
    assert proc.returncode == 2
    assert "serve.speedup" in proc.stderr and "expected a finite number > 0" in proc.stderr
    assert "Traceback" not in proc.stderr
    proc = subprocess.run([*SERVESIM, "serve", "--set", "serve.no_such_key=1"],
                          capture_output=True, text=True, timeout=TIMEOUT_S)
    assert proc.returncode == 2 and "serve.no_such_key" in proc.stderr


def test_a_port_out_of_range_names_the_flag_or_the_key(tmp_path) -> None:
    proc = subprocess.run([*SERVESIM, "serve", "--port", "-5"], capture_output=True, text=True,
                          timeout=TIMEOUT_S)
    assert proc.returncode == 2
    assert proc.stderr == "servesim: error: --port: expected an integer in [0, 65535], got -5\n"
    cfg = tmp_path / "serve.yaml"
    cfg.write_text("serve: {port: 99999}\n")
    proc = subprocess.run([*SERVESIM, "serve", str(cfg)], capture_output=True, text=True,
                          timeout=TIMEOUT_S)
    assert proc.returncode == 2
    assert proc.stderr == (f"servesim: error: {cfg}: serve.port: expected an integer in "
                           "[0, 65535], got 99999\n")


def test_a_busy_port_is_a_user_error() -> None:
    import socket

    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen(1)
        port = busy.getsockname()[1]
        proc = subprocess.run([*SERVESIM, "serve", "--port", str(port)], capture_output=True, text=True,
                              timeout=TIMEOUT_S)
    assert proc.returncode == 2
    assert f"cannot listen on 127.0.0.1:{port}" in proc.stderr and "Traceback" not in proc.stderr


@pytest.mark.parametrize(("key", "why"), [("report.output_json", "it is a directory"),
                                          ("report.per_request", "its folder")])
def test_a_bad_output_path_fails_before_listening(tmp_path, key: str, why: str) -> None:
    (tmp_path / "dir").mkdir()
    (tmp_path / "file").write_text("")
    bad = tmp_path / "dir" if key == "report.output_json" else tmp_path / "file" / "r.jsonl"
    proc = subprocess.run([*SERVESIM, "serve", "--port", "0", "--set", f"{key}={json.dumps(str(bad))}"],
                          capture_output=True, text=True, timeout=TIMEOUT_S)
    assert proc.returncode == 2
    assert proc.stderr.count("\n") == 1 and "Traceback" not in proc.stderr
    assert proc.stderr.startswith(f"servesim: error: {key}: cannot write {str(bad)!r}: {why}")
    assert "on http://" not in proc.stderr and proc.stdout == ""


def test_a_bad_sink_path_fails_before_listening(tmp_path) -> None:
    (tmp_path / "file").write_text("")
    path = json.dumps(str(tmp_path / "file" / "kv.jsonl"))
    proc = subprocess.run([*SERVESIM, "serve", "--port", "0", "--set",
                           f"sinks.kv_events=[{{type: jsonl, path: {path}}}]"],
                          capture_output=True, text=True, timeout=TIMEOUT_S)
    assert proc.returncode == 2 and proc.stderr.count("\n") == 1 and "Traceback" not in proc.stderr
    assert "cannot open" in proc.stderr and "on http://" not in proc.stderr


@pytest.mark.skipif(not os.path.exists("/dev/full"), reason="needs /dev/full")
def test_a_sink_that_fails_ends_the_server_with_status_1_and_the_report_written(tmp_path) -> None:
    """The KV events' file is /dev/full: its lines cannot be written when the sink closes.
    The report is still written, the table printed, and the exit status says the
    simulation did not end well."""
    proc, url = start(tmp_path, "--set", "sinks.kv_events=[{type: jsonl, path: /dev/full}]")
    try:
        r = httpx.post(url + "/v1/completions", json={"prompt": list(range(4, 104)), "max_tokens": 4},
                       timeout=TIMEOUT_S)
        assert r.status_code == 200
        proc.send_signal(signal.SIGTERM)
        out, err = proc.communicate(timeout=TIMEOUT_S)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 1, err
    assert "Traceback" not in err
    assert err.splitlines()[-1] == ("servesim: error: the simulation stopped while serving: jsonl kv-event "
                                    "sink '/dev/full': cannot close: No space left on device")
    assert "Successful requests:" in out
    assert json.loads((tmp_path / "report.json").read_text())["completed"] == 1


def test_sigterm_with_an_open_stream_ends_it_and_logs_no_traceback(tmp_path) -> None:
    slow = "engine.timing_model={type: fixed, prefill_ms: 0.01, decode_ms: 60000.0}"
    proc, url = start(tmp_path, "--set", slow, "--set", "serve.speedup=1")
    lines: list[str] = []
    try:
        body = {"prompt": "a b", "max_tokens": 9, "stream": True}
        with httpx.Client(timeout=TIMEOUT_S) as c, c.stream("POST", url + "/v1/completions", json=body) as r:
            for line in r.iter_lines():
                if line.startswith("data: ") and not lines:
                    proc.send_signal(signal.SIGTERM)
                lines.append(line)
        out, err = proc.communicate(timeout=TIMEOUT_S)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 0, err
    data = [x for x in lines if x.startswith("data: ")]
    assert data[-1] == "data: [DONE]"
    assert json.loads(data[-2][6:])["choices"][0]["finish_reason"] == "abort"
    assert "Traceback" not in err and "ASGI" not in err
    report = json.loads((tmp_path / "report.json").read_text())
    assert (report["num_cancelled"], report["failed"], report["completed"]) == (1, 1, 0)
