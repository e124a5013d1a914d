"""The eviction-policy section of docs/writing-a-plugin.md shows the real lineage plugin (so the
two cannot drift apart), and the suite runs that plugin on every backend
(plugins/lineage/tests)."""

from __future__ import annotations

import re
from pathlib import Path

from servesim.plugins import Plugins

ROOT = Path(__file__).resolve().parents[2]
PAGE = (ROOT / "docs" / "writing-a-plugin.md").read_text()
LINEAGE = ROOT / "plugins" / "lineage" / "src" / "servesim_lineage"


def _section() -> str:
    start = PAGE.index("\n## 5. Eviction policy\n")
    nxt = PAGE.find("\n## ", start + 1)
    return PAGE[start : nxt if nxt > 0 else len(PAGE)]


def test_section_shows_the_lineage_plugin_files() -> None:
    blocks = re.findall(r"^```python\n(.*?)^```$", _section(), re.M | re.S)
    assert (LINEAGE / "plugin.py").read_text() in blocks
    assert (LINEAGE / "policy.py").read_text() in blocks


def test_section_names_every_method_of_the_contract() -> None:
    from servesim.kv.eviction import RecordEvictionPolicy

    section = _section()
    for name in ("insert", "remove", "evict", "hit", "__len__", "__contains__"):
        assert callable(getattr(RecordEvictionPolicy, name))
        assert f"`{name}(" in section
    for field in ("block_id", "block_hash", "parent_hash", "position", "num_tokens", "ref_count",
                  "hit_count", "last_access_ms", "generated", "tier"):
        assert f"`{field}`" in section


def test_the_example_is_installed_and_registered() -> None:
    entry = Plugins().registry("eviction_policy").entry("lineage")
    assert (entry.plugin, entry.distribution.split()[0]) == ("lineage", "servesim-lineage")
    from servesim.testing import check_eviction_policy

    assert check_eviction_policy(entry.obj).failures == []
