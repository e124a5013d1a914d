"""``servesim sweep``: many replays of one base configuration (a grid, explicit points, seeds),
run on local processes or a Ray cluster, their results tabled against objectives
(docs/sweep.md). :mod:`servesim.sweep.spec` reads the sweep file, :mod:`~servesim.sweep.point`
runs one point, :mod:`~servesim.sweep.executors` runs many, :mod:`~servesim.sweep.results` and
:mod:`~servesim.sweep.pareto` make the outputs.
"""
