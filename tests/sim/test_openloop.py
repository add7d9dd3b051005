"""Open-loop serving: queueing under Poisson arrivals against closed forms, and the load sweep's bookkeeping."""

import dataclasses

import numpy as np
import pandas as pd
import pytest

from adsl.settings import Continuous, LengthDist, MicroBatching
from adsl.sim.core import simulate_core
from adsl.sim.openloop import RequestMix, best_policies, summarize
from adsl.sim.setup import SimError
from adsl.sim.systems import Deployment, build
from adsl.sim.workload import Workload
from tests.sim.builders import setup


@pytest.fixture(scope="module")
def single_server(ws):
    """GPU-AD with one slot and identical requests: a single server with a deterministic service time."""
    pair = ws.models.pair("OPT-66B")
    setup = build("GPU-AD", Deployment.of(ws.hardware, pair, 1, 256, 8, ws.settings.simulation))
    return setup, pair


def _queue_length_time_average(arrival, admitted):
    """Time-average number of requests waiting, from the arrival and admission times alone."""
    times = np.concatenate([arrival, admitted])
    steps = np.concatenate([np.ones(arrival.size), -np.ones(admitted.size)])
    order = np.lexsort((steps, times))  # at a tie, the admission first: a request that waits 0 never queues
    times, queued = times[order], np.cumsum(steps[order])
    return float(np.sum(queued[:-1] * np.diff(times)) / (times[-1] - times[0]))


@pytest.mark.parametrize("rho", [0.3, 0.5])
def test_low_load_queueing_matches_the_m_d_1_closed_forms(single_server, rho):
    """Poisson arrivals into one slot serving identical requests: M/D/1. Mean wait in queue
    Wq = rho D / (2 (1 - rho)), mean queue length Lq = rho^2 / (2 (1 - rho)) (Pollaczek-Khinchine)."""
    setup, pair = single_server
    x, n, warm = 6, 800, 50
    prompt, out = np.full((x, n), 64.0), np.full((x, n), 24)
    one = simulate_core(
        setup, pair, Workload(prompt[:1, :1], out[:1, :1], arrivals=np.zeros((1, 1))), serving=Continuous(1, 0, True)
    )
    service = float(one.requests["finished"][0] - one.requests["admitted"][0])
    rate = rho / service
    arrivals = np.stack([np.cumsum(np.random.default_rng([11, r]).exponential(1.0 / rate, n)) for r in range(x)])
    res = simulate_core(setup, pair, Workload(prompt, out, arrivals=arrivals), serving=Continuous(1, warm, True))
    q = res.requests
    assert np.all(np.isfinite(q["finished"]))
    np.testing.assert_allclose(q["finished"] - q["admitted"], service, rtol=1e-9)  # deterministic service
    waits, lengths = [], []
    for r in range(x):
        m = q["replica"] == r
        arr, adm = q["arrival"][m][warm:], q["admitted"][m][warm:]
        waits.append(float(np.mean(adm - arr)))
        lengths.append(_queue_length_time_average(arr, adm))
    se_w = np.std(waits, ddof=1) / np.sqrt(x)
    se_l = np.std(lengths, ddof=1) / np.sqrt(x)
    wq = rho * service / (2 * (1 - rho))
    lq = rho**2 / (2 * (1 - rho))
    assert abs(np.mean(waits) - wq) < 4 * se_w + 0.02 * wq
    assert abs(np.mean(lengths) - lq) < 4 * se_l + 0.02 * lq
    assert np.std(waits, ddof=1) > 0  # a real sampling spread, so the interval above is not vacuous


def test_an_idle_system_serves_every_request_at_once_and_summarizes_it(single_server):
    """Arrivals far apart: nobody queues, the first token comes right after the prefill, and the time
    per output token is the single-request decode time."""
    setup, pair = single_server
    n = 30
    prompt, out = np.full((1, n), 64.0), np.full((1, n), 16)
    arrivals = (np.arange(n) * 10.0)[None]
    res = simulate_core(setup, pair, Workload(prompt, out, arrivals=arrivals), serving=Continuous(1, 5, True))
    q = res.requests
    np.testing.assert_allclose(q["admitted"], q["arrival"])
    assert np.all(q["first_token"] > q["admitted"]) and np.all(q["finished"] > q["first_token"])
    s = summarize(res, 0.1)
    assert s.completed == n - 5 and s.queue_wait_mean_s == 0.0
    assert s.tpot_p50_s == pytest.approx(s.tpot_p99_s, rel=1e-6)
    # every token is emitted: output throughput = tokens / (last finish - first arrival)
    assert s.achieved_tok_s == pytest.approx(n * 16 / (q["finished"].max() - q["arrival"].min()))


def test_request_mix_stays_inside_the_sequence_budget():
    mix = RequestMix(np.array([10, 900, 3000]), LengthDist(256, 1.5, 16), 1024)
    prompt, out = mix.draw(5000, np.random.default_rng(0))
    assert prompt.max() <= 512 and prompt.min() >= 10
    assert np.all(prompt + out <= 1024) and out.min() >= 16
    assert (
        abs(
            np.median(
                RequestMix(LengthDist(100, 0.5, 1), LengthDist(256, 0.7, 16), 4096).draw(
                    4001, np.random.default_rng(1)
                )[1]
            )
            - 256
        )
        < 15
    )


def test_best_policies_ranks_the_observable_policies_by_their_gap_to_the_oracle():
    gaps = pd.DataFrame(
        {
            "system": ["SADDLE"] * 4 + ["GPU-SD"],
            "policy": ["oracle", "fixed", "goodput", "rejection_risk", "goodput"],
            "mean_vs_oracle": [1.0, 0.8, 0.7, 0.9, 0.95],
        }
    )
    assert best_policies(gaps, "SADDLE", 2) == ("rejection_risk", "fixed")
    assert best_policies(gaps, "SADDLE", 0) == ()
    with pytest.raises(SimError, match="no rows of system 'PIM-SD'"):
        best_policies(gaps, "PIM-SD", 1)


@pytest.mark.parametrize("decoding", ["ad", "sd"])
def test_a_request_arriving_at_an_idle_micro_batch_runs_there_at_once(hw, models, decoding):
    """Two micro-batches of two slots, open loop: a long request arrives at 0 and runs in micro-batch 0; a
    short one arrives while micro-batch 0 decodes the first (a slot of it free) and micro-batch 1 is idle.
    A micro-batch takes requests into its own slots only, so the short one runs in micro-batch 1 from its
    arrival and finishes long before the long one (in micro-batch 0 it would wait for its next round, or,
    decoding, for the long one's end)."""
    setup_ = dataclasses.replace(setup(hw, decoding=decoding, d=2), micro_batching=MicroBatching(2, split="always"))
    out = np.array([[60, 5]])
    acc = np.ones((1, 2, 80), bool) if decoding == "sd" else None
    work = Workload(np.full((1, 2), 64.0), out, acc, arrivals=np.array([[0.0, 1e-3]]))
    res = simulate_core(setup_, models.pair("OPT-66B"), work, serving=Continuous(4, 0, prefill=False))
    admitted, finished = res.requests["admitted"], res.requests["finished"]
    assert admitted.tolist() == [0.0, 1e-3]
    assert finished[1] < 0.2 * finished[0]
