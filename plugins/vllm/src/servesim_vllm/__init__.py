"""servesim-vllm: the `vllm` scheduler backend for servesim."""
