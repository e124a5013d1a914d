"""A backend honours only the eviction policies its ``Rank.eviction_support`` names: the SGLang
radix cache drives the built-in ``lru`` (its own heap) and record policies, so a third-party
policy that orders bare block ids is refused while the config loads, naming the plugin."""

from __future__ import annotations

from pathlib import Path

import pytest
from fake_plugins import VERSION, fail, install
from servesim.cli.main import main

SOURCE = """
from collections import OrderedDict

from servesim import hookimpl
from servesim.kv.eviction import EvictionPolicy, LruEviction


class FifoEviction(EvictionPolicy):
    def __init__(self):
        self._ids = OrderedDict()

    def push(self, block_id):
        self._ids.setdefault(block_id, None)

    def remove(self, block_id):
        self._ids.pop(block_id, None)

    def pop(self):
        return self._ids.popitem(last=False)[0]

    def __len__(self):
        return len(self._ids)

    def __contains__(self, block_id):
        return block_id in self._ids


class MyLru(LruEviction):
    pass


@hookimpl
def servesim_register_eviction_policies(registry):
    registry.add("fifo", FifoEviction)
    registry.add("my_lru", MyLru)
"""

REFUSAL = ("engine.eviction_policy: backend 'sglang' drives only the built-in 'lru' and eviction "
           f"policies that order block records (plugin idpolicy from idpolicy-dist {VERSION})")


@pytest.fixture
def idpolicy(monkeypatch: pytest.MonkeyPatch) -> None:
    install(monkeypatch, "idpolicy", SOURCE, dist="idpolicy-dist")


def _config(tmp_path: Path, backend: str, policy: str) -> str:
    path = tmp_path / "c.yaml"
    path.write_text(f"engine: {{backend: {backend}, eviction_policy: {policy}}}\n"
                    "workload:\n  synthetic: {num_requests: 4}\n")
    return str(path)


@pytest.mark.parametrize("policy", ["fifo", "{type: fifo}", "my_lru"])
@pytest.mark.parametrize("command", ["validate", "run"])
def test_sglang_refuses_an_id_level_policy(
    idpolicy: None, tmp_path: Path, capsys: pytest.CaptureFixture[str], command: str, policy: str
) -> None:
    # A subclass of lru is a third-party id policy too: the radix tree's heap is lru itself.
    cfg = _config(tmp_path, "sglang", policy)
    assert fail([command, cfg], capsys) == f"{cfg}: {REFUSAL}"


@pytest.mark.parametrize(("backend", "policy"), [
    ("vllm", "fifo"), ("trtllm", "fifo"), ("sglang", "lru"), ("sglang", "lineage"),
])
def test_what_each_backend_drives_validates(
    idpolicy: None, tmp_path: Path, capsys: pytest.CaptureFixture[str], backend: str, policy: str
) -> None:
    cfg = _config(tmp_path, backend, policy)
    assert main(["validate", cfg]) == 0
    assert capsys.readouterr().out.startswith(f"OK: {cfg}: backend {backend} ")
