"""``mypyc_attr`` for the modules the opt-in compiled build compiles (docs/performance.md).

mypyc reads the decorator while compiling and leaves it out of the extension module; the
interpreted package never needs mypy's runtime helpers, so at run time it is a no-op.
``allow_interpreted_subclasses=True`` marks the compiled classes that interpreted code
(plugins, tests, uncompiled core modules) subclasses.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from mypy_extensions import mypyc_attr
else:
    def mypyc_attr(*_args: Any, **_kwargs: Any) -> Any:
        return lambda cls: cls

__all__ = ["mypyc_attr"]
