"""Bookkeeping several backends share: prefill/decode handoff (:mod:`~servesim.mechanics.handoff`),
speculative-decoding acceptance (:mod:`~servesim.mechanics.speculative`) and the contract's
numeric helpers (:mod:`~servesim.mechanics.numeric`)."""
