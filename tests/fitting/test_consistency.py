"""A calibration that moves the draft's confidences with its acceptance keeps the measured
P(accept | confidence) curve, ranks categories' adaptive drafts like their acceptance, and keeps the
measured spread of per-request rates; moving the curve instead (the previous model) leaves the curve."""

import numpy as np
import pandas as pd
import pytest

from adsl.fitting import distributions as dist
from adsl.fitting.consistency import check_models
from adsl.fitting.generator import continuation_boost, draw_streams
from adsl.fitting.paper_calibration import calibrate_pair, rates_for_shift
from adsl.fitting.pipeline import request_rate_sd
from adsl.fitting.synthetic import synthetic_profile
from adsl.fitting.tau import calibrate_tau


@pytest.fixture(scope="module")
def measured():
    rng = np.random.default_rng(0)
    conf = dist.fit_confidence(np.concatenate([rng.beta(8, 1, 3000), rng.beta(2, 2, 1000)]))
    model = {"confidence": conf, "joint": {"a": 0.8, "b": 1.0, "s": 0.5, "g": 0.3}}
    cats = ("summarization", "open_qa")
    profile = synthetic_profile(dict.fromkeys(cats, model), n_requests=120, t=128, seed=1)
    # the paper pair accepts open_qa more than summarization: one level down, one up, with h = 1
    targets = {
        c: dict(zip((4, 8, 12), rates_for_shift(model, s, (4, 8, 12), 600, 128, 3, 1.0, "confidence"), strict=True))
        for c, s in zip(cats, (-1.0, 0.8), strict=True)
    }
    return model, cats, profile, targets


def _calibrated(measured, applies_to):
    model, cats, profile, targets = measured
    spreads = {c: request_rate_sd(profile, c) for c in cats}
    cal = calibrate_pair(
        dict.fromkeys(cats, model),
        targets,
        600,
        128,
        3,
        continuation=1.0,
        applies_to=applies_to,
        spread_targets=spreads,
    )
    models = [{**model, "pair": "P", "category": c, "calibration": cal[c]} for c in cats]
    rows = []
    for m in models:
        conf, acc = draw_streams(m, 600, 192, np.random.default_rng(4))
        tau = calibrate_tau(conf, acc, d_max=12, boost=continuation_boost(m))
        rows.append({"pair": "P", "category": m["category"], "tau": tau["tau"], "mean_draft": tau["mean_draft"]})
    return check_models(profile, models, pd.DataFrame(rows), 600, 192, 5), cal


def test_moving_confidences_keeps_the_curve_the_ranking_and_the_spread(measured):
    (summary, curves), cal = _calibrated(measured, "confidence")
    assert (summary.curve_bins >= 4).all()
    assert (summary.curve_max_gap < 0.05).all(), summary[["category", "curve_max_gap"]]
    assert summary.ranks_agree.all()
    s = summary.set_index("category")
    assert s.mean_draft["open_qa"] > s.mean_draft["summarization"]
    assert s.acceptance_d8["open_qa"] > s.acceptance_d8["summarization"]
    assert ((summary.request_rate_sd_ratio > 0.75) & (summary.request_rate_sd_ratio < 1.25)).all()
    assert all(c["max_abs_error"] < 0.02 for c in cal.values())  # the level is still the target's


def test_moving_the_curve_instead_leaves_the_measured_curve(measured):
    (summary, _), _ = _calibrated(measured, "acceptance")
    assert (summary.curve_max_gap > 0.1).any()
