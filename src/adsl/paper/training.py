"""The paper mode's training targets: values read off the paper's Figs. 3a, 3b, 12, 13 and 16 for
OPT-66B (``paper_training.json``, outside the repository). This module is the only reader of paper
values the calibration sees; every other figure and pair of the paper is the test set."""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

from adsl.errors import AdslError

MAX_BYTES = 1_000_000  # the published file is under 3 kB
FIG16_PARTS = (
    "PIM-SD_verification",
    "PIM-SD_prediction",
    "SADDLE_total",
    "SADDLE_verification",
    "SADDLE_prediction",
    "SADDLE_overlap",
)


@dataclass(frozen=True)
class Target:
    """One training value: the figure it belongs to, the point within it, and the paper's value.

    ``figure``: fig03a_sd_over_ad, fig03a_ad, fig03b, fig12, fig13 or fig16; ``system`` and ``batch`` and
    ``draft_length`` say which simulated quantity it is (see ``adsl.paper.predict``)."""

    figure: str
    system: str
    batch: int
    draft_length: int
    value: float

    @property
    def key(self) -> tuple[str, str, int, int]:
        return (self.figure, self.system, self.batch, self.draft_length)


def _number(file: str, field: str, value) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float) or not 0.0 < float(value) < 1e6:
        raise AdslError(f"{file}: {field}: expected a positive number below 1e6, got {value!r}")
    return float(value)


def read_training(path: str | Path, draft_length: int = 8) -> tuple[Target, ...]:
    """Every training value of the file; points that are 1 by construction (AD at batch 8 normalised to
    itself) are left out. ``draft_length``: the SD baselines' d of Figs. 3a, 12, 13 and 16."""
    path = Path(path)
    file = str(path)
    try:
        if path.stat().st_size > MAX_BYTES:
            raise AdslError(f"{file}: larger than {MAX_BYTES} bytes; the training file is a few kB")
        raw = json.loads(path.read_text(encoding="utf-8"))
    except OSError as exc:
        raise AdslError(f"{file}: cannot read the paper's training targets ({exc.strerror})") from exc
    except json.JSONDecodeError as exc:
        raise AdslError(f"{file}: not JSON (line {exc.lineno}: {exc.msg})") from exc
    out: list[Target] = []

    def section(name: str) -> dict:
        if not isinstance(raw.get(name), dict):
            raise AdslError(f"{file}: {name}: missing or not an object")
        return {k: v for k, v in raw[name].items() if not k.startswith("_")}

    d = draft_length
    for b, v in section("fig03a_sd_over_ad_by_batch_d8").items():
        out.append(Target("fig03a_sd_over_ad", "SD", int(b), 8, _number(file, f"fig03a_sd_over_ad_by_batch_d8.{b}", v)))
    for b, v in section("fig03a_ad_norm_by_batch").items():
        if int(b) != 8:
            out.append(Target("fig03a_ad", "AD", int(b), 8, _number(file, f"fig03a_ad_norm_by_batch.{b}", v)))
    for k, v in section("fig03b_sd_over_ad_by_d_batch64").items():
        out.append(Target("fig03b", "SD", 64, int(k), _number(file, f"fig03b_sd_over_ad_by_d_batch64.{k}", v)))
    for b, systems in section("fig12_throughput_norm_gpu_ad_opt66b").items():
        for s, v in systems.items():
            out.append(Target("fig12", s, int(b), d, _number(file, f"fig12_throughput_norm_gpu_ad_opt66b.{b}.{s}", v)))
    fig13 = section("fig13_energy_norm_gpu_ad_opt66b")
    batches = raw["fig13_energy_norm_gpu_ad_opt66b"].get("_batches", [16, 32, 64, 128])
    for s, values in fig13.items():
        for b, v in zip(batches, values, strict=True):
            out.append(Target("fig13", s, int(b), d, _number(file, f"fig13_energy_norm_gpu_ad_opt66b.{s}", v)))
    fig16 = section("fig16_latency_s_opt66b")
    batches = raw["fig16_latency_s_opt66b"].get("_batches", [16, 32, 64, 128])
    for i, b in enumerate(batches):
        total = _number(file, "fig16_latency_s_opt66b.PIM-SD_total", fig16["PIM-SD_total"][i])
        for part in FIG16_PARTS:  # as a share of PIM-SD's total: the paper's request count is unstated
            v = _number(file, f"fig16_latency_s_opt66b.{part}", fig16[part][i])
            out.append(Target("fig16", part, int(b), d, v / total))
    return tuple(out)
