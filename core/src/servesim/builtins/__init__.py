"""servesim's own plugins: core's defaults, registered through the same hooks as anyone's.

Every module in this package is registered by :func:`servesim.plugins.make_plugin_manager`
as plugin ``servesim.builtins.<module>`` (sorted by module name), reported as coming from
distribution ``servesim``. A module here holds only ``@hookimpl`` functions and imports its
machinery lazily inside them, so building a plugin manager stays cheap. Like any plugin, a
built-in can be blocked with ``SERVESIM_DISABLE_PLUGINS=servesim.builtins.<module>``.
"""
