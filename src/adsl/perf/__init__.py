"""Analytical cost model of LLM decoding on GPUs and HBM-PIM: models, hardware, operators, cost."""
