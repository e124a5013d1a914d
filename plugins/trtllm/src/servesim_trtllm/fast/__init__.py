"""The trtllm rank's fast paths, behind one seam (docs/architecture.md): the steady batch
(:mod:`servesim_trtllm.fast.steady`), which ``TrtllmRank`` and ``TrtCore`` enter, and the runs
of passes built on it (:mod:`servesim_trtllm.fast.runs`), which only ``TrtllmRank`` enters.
Both give the bytes the reference step (servesim_trtllm.rank, .core, .policies) gives."""
