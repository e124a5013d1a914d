"""``servesim sweep``: many replays of one base configuration (a grid, explicit points, seeds),
run on local processes or a Ray cluster, their results tabled against objectives
(docs/sweep.md). :mod:`servesim_sweep.spec` reads the sweep file, :mod:`~servesim_sweep.point`
runs one point, :mod:`~servesim_sweep.executors` runs many, :mod:`~servesim_sweep.results` and
:mod:`~servesim_sweep.pareto` make the outputs.
"""
