"""servesim-overhead: what a serving engine spends around its kernels, wrapped around any
timing model (``engine.timing_model: {type: overhead, inner: {...}}``)."""
