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
