"""The vllm rank's fast paths, behind one seam (docs/architecture.md): the steady batch
(:mod:`servesim_vllm.fast.steady`), which ``VllmScheduler.run_pass`` enters, and the runs of
passes built on it (:mod:`servesim_vllm.fast.runs`), which only ``VllmRank`` enters. Both
give the bytes the reference pass (servesim_vllm.scheduler) gives, step by step."""
