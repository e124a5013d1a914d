"""``servesim calibrate``: a timing model fitted to measured forward passes (docs/timing.md).
:mod:`servesim_calibrate.fit` reads the records and fits; :mod:`~servesim_calibrate.command`
declares the command's arguments."""
