"""Workloads: the session/turn model every trace reader and generator produces
(:mod:`~servesim.workload.model`), Mooncake traces (:mod:`~servesim.workload.mooncake`), the
synthetic generator (:mod:`~servesim.workload.synthetic`) and line-oriented input reading
(:mod:`~servesim.workload.textlines`)."""
