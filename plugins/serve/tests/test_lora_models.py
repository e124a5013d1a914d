"""LoRA adapters over HTTP: a request's ``model`` names an adapter of ``engine.lora_modules``,
``/v1/models`` lists the base model then the adapters (vLLM's cards), and an unknown name gets
vLLM's 404."""

from __future__ import annotations

import httpx
import openai
import pytest
from servesim_serve.testing import running

SETS = ["engine.timing_model={type: fixed, prefill_ms: 10.0, decode_ms: 2.0}", "serve.speedup=1000",
        "engine.max_model_len=256", "engine.enable_lora=true", "engine.max_loras=2",
        "engine.lora_modules=[{id: 3, name: sql}, {id: 5}]"]


@pytest.fixture(scope="module")
def server():
    with running(SETS) as s:
        yield s


def test_models_list_the_adapters_after_the_base_model(server) -> None:
    data = httpx.get(server.base + "/models").json()["data"]
    assert [(m["id"], m["parent"], m["root"], m["max_model_len"]) for m in data] == [
        ("servesim", None, "servesim", 256), ("sql", "servesim", "sql", None),
        ("adapter-5", "servesim", "adapter-5", None)]
    assert data[1]["permission"][0]["id"] == "modelperm-sql"
    assert {m["owned_by"] for m in data} == {"vllm"} and {m["object"] for m in data} == {"model"}


def test_a_request_names_its_adapter(server) -> None:
    with openai.OpenAI(base_url=server.base, api_key="none", max_retries=0, timeout=30) as c:
        r = c.completions.create(model="sql", prompt="a b c d", max_tokens=3)
        assert r.usage.completion_tokens == 3
        c.completions.create(model="adapter-5", prompt="a b", max_tokens=2)
        c.completions.create(model="servesim", prompt="a b", max_tokens=2)
        with pytest.raises(openai.NotFoundError) as info:
            c.completions.create(model="adapter-4", prompt="a", max_tokens=1)
    err = info.value.body
    assert (err["type"], err["param"], err["code"]) == ("NotFoundError", "model", 404)
    assert err["message"] == "The model `adapter-4` does not exist. Valid aliases: servesim."
    cache = server.server.driver.engines[0].ranks[0].lora_cache
    assert cache.stats.requests == {3: 1, 5: 1, 0: 1}
    assert list(cache.gpu) == [3, 5]
    text = httpx.get(server.base.removesuffix("/v1") + "/metrics").text
    assert ("2", "", "") in _lora_series(text)  # idle: no adapter waiting or running


def _lora_series(text: str) -> list[tuple[str, str, str]]:
    """(max_lora, waiting, running) of each vllm:lora_requests_info series, in output order."""
    import re

    pat = re.compile(r'^vllm:lora_requests_info\{max_lora="(\d*)",running_lora_adapters="([^"]*)",'
                     r'waiting_lora_adapters="([^"]*)"\} ', re.M)
    return [(m, w, r) for m, r, w in pat.findall(text)]


def test_metrics_name_the_adapters_waiting_and_running() -> None:
    """``vllm:lora_requests_info`` at each scrape: the adapters of requests not yet admitted
    (waiting) and admitted but not ended (running), by name, in ascending id; a base-model
    request is in neither."""
    from servesim_prometheus.metrics import EngineMetrics, FinishedRequest
    from servesim_serve.records import LiveRequest
    from servesim_serve.vllm_metrics import EngineMetricsObserver

    metrics = EngineMetrics("vllm", engines=["0"])
    metrics.enable_lora(2)
    observer = EngineMetricsObserver(metrics, FinishedRequest, 1)
    observer.lora_names = {3: "sql", 5: "adapter-5"}
    reqs = [LiveRequest(i, 4, 2, 0, 0.0) for i in range(4)]
    for req, lora in zip(reqs, (5, 3, 0, 5), strict=True):
        req.lora, req.worker, req.dp_rank = lora, 0, 0
        observer.arrived(req, None)

    def scrape() -> list[tuple[str, str, str]]:
        observer._lora_state()  # noqa: SLF001 - what render() sets, without ranks to read
        return _lora_series(generate_latest(metrics.registry).decode())

    from prometheus_client import generate_latest

    assert scrape() == [("2", "sql,adapter-5", "")]
    reqs[3].admitted = 1.0
    assert ("2", "sql,adapter-5", "adapter-5") in scrape()
    reqs[1].admitted = 2.0
    reqs[1].done_ms = 3.0
    observer.finished(reqs[1])
    assert ("2", "adapter-5", "adapter-5") in scrape()
    for req in (reqs[0], reqs[3]):
        req.done_ms = 4.0
        observer.finished(req)
    assert ("2", "", "") in scrape()
    assert len(scrape()) == 4  # one series per label set seen, as vLLM's gauge keeps them
