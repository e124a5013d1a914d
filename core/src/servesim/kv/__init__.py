"""KV-cache mechanics shared by block-based backends: hashing, block pool, eviction."""
