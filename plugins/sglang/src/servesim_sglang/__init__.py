"""servesim-sglang: the `sglang` scheduler backend for servesim."""
