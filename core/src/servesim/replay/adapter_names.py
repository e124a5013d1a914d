"""A trace's LoRA adapter names resolved to the adapters ``engine.lora_modules`` configures.

A trace names a request's adapter by id or by name (docs/trace-formats.md, ``lora``). With
``engine.enable_lora`` and ``engine.lora_modules`` set, a name means the module served under
it (its ``name``, else ``adapter-<id>``; servesim.mechanics.lora.served_adapters), as a
``serve`` request's ``model`` does, and a name no module has is a trace error naming the file,
the line of its first use and the field. Without ``lora_modules`` the reader's numbering
stands (each new name the next id after those seen so far). Ids are taken as given.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from servesim.errors import TraceError
from servesim.mechanics.lora import served_adapters
from servesim.workload.model import Workload

if TYPE_CHECKING:
    from servesim.config.engine import EngineConfig


def resolve_adapter_names(workload: Workload, engine: EngineConfig) -> None:
    """Give every turn that names an adapter the id of the module of that name (in place);
    a :class:`TraceError` for a name no module has. Nothing to do without named adapters,
    LoRA or ``lora_modules``."""
    names = workload.lora_names
    if not names or not engine.enable_lora or not engine.lora_modules:
        return
    served = served_adapters(engine.lora_modules)
    for name, rids in names.items():
        lora = served.get(name)
        if lora is None:
            valid = ", ".join(served)
            raise TraceError(f"'lora': adapter {name!r} is not one of engine.lora_modules "
                             f"({valid})", file=workload.source, line=workload.line_of(rids[0]))
        workload.set_adapter(name, rids, lora)


__all__ = ["resolve_adapter_names"]
