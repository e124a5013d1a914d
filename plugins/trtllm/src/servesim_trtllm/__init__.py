"""servesim-trtllm: the `trtllm` scheduler backend for servesim."""
