"""The ``servesim`` command line: :mod:`~servesim.cli.main` (the entry point, ``validate`` and
``plugins``), :mod:`~servesim.cli.run` (``servesim run``), :mod:`~servesim.cli.validate`
(building every configured plugin without running) and :mod:`~servesim.cli.progress` (the
progress bar on a terminal). Plugins add more commands (``servesim_add_commands``)."""
