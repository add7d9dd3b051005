"""Acceptance profiling: real speculative decoding (torch, extra `profile`) and its trace format
(numpy/pyarrow only, so the main workflow reads profiles without torch)."""
