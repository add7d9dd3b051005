"""Stage 3: speculative-decoding system simulation on GPU and GPU + PIM systems."""
