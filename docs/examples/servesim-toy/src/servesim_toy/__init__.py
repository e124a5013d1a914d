"""servesim-toy: the example plugin of docs/writing-a-plugin.md, one of each plugin kind.

The names below load on first use (a module ``__getattr__``, PEP 562): servesim imports the
entry-point module ``servesim_toy.plugin`` on every command, and that import brings in this
package, which must then stay as cheap as the entry-point module itself.
"""

from __future__ import annotations

from importlib import import_module
from typing import Any

#: Each public name and the module that defines it.
_HOMES = {
    "ConstantTiming": "timing",
    "ConstantTimingConfig": "timing",
    "CsvTrace": "trace",
    "LeastLoadedRouter": "router",
    "PagedConfig": "paged",
    "PagedToyRank": "paged",
    "RooflineConfig": "roofline",
    "RooflineTiming": "roofline",
    "TallyConfig": "sinks",
    "TallySink": "sinks",
    "ToyConfig": "rank",
    "ToyRank": "rank",
}

__all__ = sorted(_HOMES)


def __getattr__(name: str) -> Any:
    home = _HOMES.get(name)
    if home is None:
        raise AttributeError(f"module 'servesim_toy' has no attribute {name!r}")
    value = getattr(import_module(f"servesim_toy.{home}"), name)
    globals()[name] = value
    return value
