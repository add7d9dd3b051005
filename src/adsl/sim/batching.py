"""Request slots of a serving engine: static batches or continuous (iteration-level) batching.

Static (the paper's per-batch-size evaluation as we first modelled it): ``slots`` requests start
together and the batch decodes until the last one finishes; nothing refills a finished slot.

Continuous (Orca, OSDI'22; vLLM, SOSP'23): every slot holds a request while requests wait; a request
that finishes frees its slot and the next queued request takes it when its round ends (its prompt is
prefilled then, when ``prefill`` is on). Throughput is measured over a steady-state window: from the
``warmup``-th completion (the first wave starts in lock-step) to the completion after which a freed slot
finds the queue empty (then the batch drains; ``adsl.sim.result.window``). The window is reported with
every result so a reader can see what it covered.

The event loop (``adsl.sim.loop``) keeps the slots; this module holds the settings.
"""

from __future__ import annotations

from dataclasses import dataclass

MODES = ("static", "continuous")


@dataclass(frozen=True)
class Batching:
    """How a configuration point fills its ``batch`` slots (``simulation.batching`` in the config)."""

    mode: str = "static"
    requests_per_slot: int = 4  # continuous: requests served per slot in one run (queue length / slots + 1)
    warmup: float = 1.0  # continuous: the window opens after warmup x slots completions
    prefill: bool = True  # continuous: charge each admitted request's prefill pass

    def __post_init__(self):
        if self.mode not in MODES:
            raise ValueError(f"batching mode must be one of {MODES}, got {self.mode!r}")
        if self.requests_per_slot < 1 or self.warmup < 0:
            raise ValueError("batching: requests_per_slot >= 1 and warmup >= 0 needed")
        if self.mode == "continuous" and self.warmup + 1 > self.requests_per_slot:
            raise ValueError(
                f"batching: with requests_per_slot {self.requests_per_slot} the queue empties before "
                f"warmup {self.warmup} x slots requests have finished; the steady-state window would be empty"
            )

    def requests(self, slots: int) -> int:
        """Requests one run serves."""
        return slots if self.mode == "static" else slots * self.requests_per_slot

    def serving(self, slots: int) -> Continuous | None:
        """What an engine needs: None for a static batch."""
        if self.mode == "static":
            return None
        return Continuous(slots, int(round(self.warmup * slots)), self.prefill)


@dataclass(frozen=True)
class Continuous:
    """Continuous batching of one engine run: ``slots`` in flight, the window opens after ``warmup``
    completions, ``prefill`` charges admitted requests' prompts."""

    slots: int
    warmup: int
    prefill: bool = True
