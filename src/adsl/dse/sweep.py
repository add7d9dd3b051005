"""Run a sweep's configurations: every system at every configuration, its operating configuration chosen
by the fair-referee search (``adsl.sim.experiment.run_point``); one row per (configuration, system)."""

from __future__ import annotations

import sys
import time

import pandas as pd

from adsl.dse.axes import configured
from adsl.dse.design import chunk, chunks
from adsl.fitting.modelfile import read_model
from adsl.sim.experiment import run_point
from adsl.sim.setup import SimError

# what a point's row keeps (adsl.sim.experiment.point_row and the search's columns)
KEEP = (
    "hardware",
    "throughput_tok_s",
    "throughput_ci95",
    "tokens_per_j",
    "tokens_per_j_ci95",
    "replicas",
    "fits_memory",
    "memory_needed_gb",
    "memory_available_gb",
    "configuration",
    "search_candidates",
    "search_gain",
    "mean_draft_length",
    "gpu_util",
    "pim_util",
)


def point_columns(system: str, row: dict | None, cost: float, error: str) -> dict:
    """A point's columns in one order, from its experiment row (``KEEP``), or empty where the system cannot
    run the configuration (``row`` None: no numbers, not fitting, the reason in ``error``)."""
    kept = {k: (row[k] if row is not None else float("nan")) for k in KEEP if k != "configuration"}
    if row is None:
        kept.update(hardware="", fits_memory=False)
    return {
        "system": system,
        "system_policy": row["policy"] if row is not None else "",
        **kept,
        "search_configuration": row["configuration"] if row is not None else "",
        "cost_proxy": cost,
        "error": error,
    }


def cost_proxy(system, cost) -> float:
    """The hardware cost proxy of a system: its GPUs and PIM stacks at ``cost`` (in GPUs)."""
    return system.gpus * cost["gpu"] + system.stacks * cost["pim_stack"]


def run_configuration(ws, values: dict, models: dict, taus: dict) -> list[dict]:
    """Rows of every sweep system at one configuration (axis name -> value). ``models``: pair -> category
    -> acceptance model; ``taus``: pair -> category -> tau."""
    dse = ws.settings.dse
    c = configured(ws, values)
    sim = c.ws.settings.simulation
    tau = c.taus(taus)
    drawn: dict = {}  # the configuration's streams, drawn once for its systems (its categories)
    built: list = []  # its pass tables, each built once for the systems that share it
    rows = []
    for system in dse.systems:
        try:
            row = run_point(c.ws, sim, c.point(system), models[c.pair], tau, drawn, built=built)
        except SimError as exc:  # a configuration the system cannot run (a pool smaller than its batch)
            rows.append(point_columns(system, None, float("nan"), str(exc)))
            continue
        cost = cost_proxy(c.ws.hardware.system(row["hardware"]), dse.cost)
        rows.append(point_columns(system, row, cost, ""))
    return rows


def run_chunk(ws, chunk_id: int, model_paths: dict[str, dict[str, str]], taus: dict) -> pd.DataFrame:
    """Chunk ``chunk_id`` of the sweep: its configurations' rows, the design's columns first."""
    dse = ws.settings.dse
    part = chunk(dse, chunk_id)
    pairs = sorted(set(part["pair"]) if "pair" in part else {dse.base["pair"]})
    models = {p: {c: read_model(f) for c, f in model_paths[p].items()} for p in pairs}
    axes = [a.name for a in dse.axes]
    t0 = time.perf_counter()
    rows = []
    for i, (_, conf) in enumerate(part.iterrows(), 1):
        values = {a: conf[a] for a in axes}
        head = {"configuration": int(conf["configuration"]), "block": conf["block"], "sample": int(conf["sample"])}
        for r in run_configuration(ws, values, models, taus):
            rows.append({**head, **values, **r})
        print(f"dse chunk {chunk_id}: configuration {i} of {len(part)}, {time.perf_counter() - t0:.1f} s", flush=True)
    line = (
        f"dse chunk {chunk_id + 1} of {chunks(dse)}: {len(part)} configurations x {len(dse.systems)} systems "
        f"in {time.perf_counter() - t0:.1f} s"
    )
    print(line, flush=True)
    print(line, file=sys.__stderr__, flush=True)  # the terminal's progress line, beside Snakemake's
    return pd.DataFrame(rows)


def merge(parts: list[pd.DataFrame], systems: tuple[str, ...]) -> pd.DataFrame:
    """The sweep's table from its chunks' parts, in configuration and ``systems`` order whatever the
    parts' order."""
    df = pd.concat(parts, ignore_index=True)
    order = {s: i for i, s in enumerate(systems)}
    df = df.assign(_s=df["system"].map(order)).sort_values(["configuration", "_s"], kind="stable")
    return df.drop(columns="_s").reset_index(drop=True)
