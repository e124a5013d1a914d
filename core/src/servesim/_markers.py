"""The pluggy markers of the ``servesim`` project (entry-point group ``servesim``)."""

import pluggy

PROJECT = "servesim"
hookspec = pluggy.HookspecMarker(PROJECT)
hookimpl = pluggy.HookimplMarker(PROJECT)
