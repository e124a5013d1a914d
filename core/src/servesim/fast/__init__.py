"""The speed overlay: everything that makes a replay fast without changing what it computes.

Runs of passes (:mod:`~servesim.fast.runs`, :mod:`~servesim.fast.run_pending`,
:mod:`~servesim.fast.replay_runs`), steady decode batches (:mod:`~servesim.fast.steady`),
cohort token logs (:mod:`~servesim.fast.cohorts`), forward-pass metrics by column
(:mod:`~servesim.fast.fpm_runs`), merged and offloaded sinks (:mod:`~servesim.fast.sink_merge`,
:mod:`~servesim.fast.sink_offload`). The reference semantics live in the other packages;
each piece here is checked against them (runs against stepping, byte-identical reports).
docs/architecture.md says which modules may import this package.
"""
