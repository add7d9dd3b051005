"""adsl: reproduce and extend SADDLE (adaptive draft length speculative decoding on GPU + HBM-PIM)."""

__version__ = "0.1.0"
