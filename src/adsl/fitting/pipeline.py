"""From a profile to acceptance models: per-category fits, model selection, held-out check."""

from __future__ import annotations

import numpy as np
import pandas as pd
from scipy import stats

from adsl.fitting import distributions as dist
from adsl.fitting.entropy import entropy_check, fit_entropy
from adsl.fitting.generator import draw_streams, fixed_lengths, replay_lengths
from adsl.fitting.joint_model import binned_calibration, calibration_curve, fit_joint
from adsl.profiling.replay import replay
from adsl.profiling.traces import Profile


def greedy_sequences(profile: Profile, category: str, requests: list[int] | None = None, column: str = "match"):
    """Per-request (confidence, ``column``) arrays of the teacher-forced greedy records of a category
    (``column``: match, or draft_entropy)."""
    req = profile.requests
    ids = req[(req["mode"] == "greedy") & (req["category"] == category)].request_id
    if requests is not None:
        ids = ids[ids.isin(requests)]
    pos = profile.positions[profile.positions.request_id.isin(ids)].sort_values(["request_id", "pos"])
    groups = [g for _, g in pos.groupby("request_id", sort=True)]
    return [g.draft_top1.to_numpy() for g in groups], [g[column].to_numpy() for g in groups]


def request_rate_sd(profile: Profile, category: str, positions: int = 128) -> float:
    """Spread (sd) of the per-request acceptance rates of a category: the share of each greedy request's
    first ``positions`` teacher-forced positions where the draft's token is the target's."""
    _, match = greedy_sequences(profile, category)
    return float(np.std([np.mean(m[:positions]) for m in match]))


def by_previous_match(conf: list[np.ndarray], match: list[np.ndarray]) -> tuple[np.ndarray, np.ndarray]:
    """Confidences at positions that follow a match and at positions that follow a miss (a request's
    first position counts as following a match)."""
    after_match, after_miss = [], []
    for c, m in zip(conf, match, strict=True):
        prev = np.concatenate([[1], np.asarray(m[:-1])]).astype(bool)
        after_match.append(c[prev])
        after_miss.append(c[~prev])
    return np.concatenate(after_match), np.concatenate(after_miss)


def conditional_confidence(conf: list[np.ndarray], match: list[np.ndarray]) -> dict | None:
    """Confidence fitted separately after a match and after a miss (the draft is less sure right
    after the text left its own prediction); None when either side has too few positions."""
    after_match, after_miss = by_previous_match(conf, match)
    if min(len(after_match), len(after_miss)) < dist.MIN_CONFIDENCE_SAMPLES:
        return None
    return {"after_match": dist.fit_confidence(after_match), "after_miss": dist.fit_confidence(after_miss)}


def accepted_at(match: list[np.ndarray], d: int) -> np.ndarray:
    """Accepted tokens of every verification step of the match sequences replayed at fixed draft length d."""
    return np.concatenate([replay(m, np.full(len(m), d)).accepted.to_numpy() for m in match])


def fit_category(profile: Profile, category: str, pair: str, bootstrap: int = 100, seed: int = 0) -> dict:
    """A category's acceptance model: every fitted piece, the model selections and the calibration check."""
    conf, match = greedy_sequences(profile, category)
    dist.need(len(match), 3, f"category {category!r} (greedy requests)")
    c_all, m_all = np.concatenate(conf), np.concatenate(match)
    rng = np.random.default_rng(seed)
    joint = fit_joint(conf, match)
    model = {
        "pair": pair,
        "category": category,
        "source": "measured",
        "confidence": dist.fit_confidence(c_all, bootstrap=bootstrap, rng=rng),
        "confidence_given_previous": conditional_confidence(conf, match),
        "confidence_request_effect": dist.fit_confidence_request_effect(conf),
        "joint": joint,
        "heterogeneity": dist.fit_request_heterogeneity(
            np.array([m.sum() for m in match]), np.array([len(m) for m in match])
        ),
        "dependence": dist.fit_dependence(match),
        "accepted_length": {str(d): dist.fit_accepted_length(accepted_at(match, d), d) for d in (4, 8)},
        "calibration_check": binned_calibration(c_all, m_all),
        "match_rate": float(m_all.mean()),
        "entropy": entropy_model(profile, category),
    }
    model["calibration_check"]["fitted"] = calibration_curve(
        joint, model["calibration_check"]["confidence"], prev_rate=model["match_rate"]
    ).tolist()
    return model


def entropy_model(profile: Profile, category: str) -> dict:
    """The draft entropy given confidence (``adsl.fitting.entropy``), fitted on every greedy request, with
    its check: fitted on the even-numbered requests, drawn against the odd-numbered ones."""
    conf, ent = greedy_sequences(profile, category, column="draft_entropy")
    fitted = fit_entropy(np.concatenate(conf), np.concatenate(ent))
    half = fit_entropy(np.concatenate(conf[::2]), np.concatenate(ent[::2]))
    fitted["check"] = entropy_check(half, np.concatenate(conf[1::2]), np.concatenate(ent[1::2]))
    return fitted


def selection_rows(model: dict) -> list[dict]:
    """One row per (question, candidate) for the model-selection table."""
    conf, het, dep = model["confidence"], model["heterogeneity"], model["dependence"]
    questions = [
        (
            "confidence distribution",
            {n: c["aic"] for n, c in conf["candidates"].items()},
            conf["selected"],
            "KS",
            conf["ks_pvalue"],
        ),
        ("request heterogeneity", het["aic"], min(het["aic"], key=het["aic"].get), "LR", het["lr_pvalue"]),
        ("dependence along a draft", dep["aic"], dep["selected"], "LR", dep["lr_pvalue"]),
    ]
    if "entropy" in model:  # no AIC: one nonparametric candidate, checked on held-out requests
        check = model["entropy"]["check"]
        questions.append(
            ("entropy given confidence", {"binned quantiles": np.nan}, "binned quantiles", "KS", check["ks_pvalue"])
        )
    for d, fit in model["accepted_length"].items():
        for name in ("truncated_geometric", "beta_geometric"):
            aics = {n: fit[n]["aic"] for n in ("truncated_geometric", "beta_geometric")}
            questions.append(
                (f"accepted length d={d}", {name: aics[name]}, fit["selected"], "chi2", fit[name]["chi2_pvalue"])
            )
    return [
        dict(
            pair=model["pair"],
            category=model["category"],
            question=q,
            candidate=name,
            aic=aic,
            selected=name == selected,
            test=test,
            pvalue=pvalue,
        )
        for q, aics, selected, test, pvalue in questions
        for name, aic in aics.items()
    ]


HELDOUT_LENGTHS = (4, 8)  # fixed draft lengths whose accepted-length histograms the held-out check compares


def heldout_check(
    profile: Profile, category: str, pair: str, seed: int = 0, n_streams: int = 4000, split: int = 0, sets: int = 200
) -> dict:
    """Fit on a random half of the requests (split ``split`` of ``seed``), generate, compare with the
    other half.

    Besides the plain Pearson chi-square (every draft window counted as independent), the accepted-
    length histograms get a parametric-bootstrap p-value: ``sets`` held-out sets of the same number of
    requests drawn from the fitted model give the null distribution of the same statistic, so windows
    of one request share its request effect, as in the data. ``rate_lo``/``rate_hi`` are the 2.5/97.5 %
    points of such a set's acceptance rate: how far a half of this many requests can lie from the
    model by request-to-request spread alone. The fit itself rests on one half, so the two-sample
    version compares ``rate_test - rate_train`` with ``diff_lo``/``diff_hi``, the same points of the
    difference between two halves drawn from the model. For the same reason ``chi2_refit_pvalue``
    redoes the fit per bootstrap replicate in its dominant part: each replicate's statistic is taken
    against the pmf of the model moved to the rate of a training half drawn with it (``_level_curve``).
    """
    req = profile.requests
    ids = np.sort(req[(req["mode"] == "greedy") & (req["category"] == category)].request_id.to_numpy())
    rng = np.random.default_rng([seed, split])
    rng.shuffle(ids)
    train, test = sorted(ids[: len(ids) // 2]), sorted(ids[len(ids) // 2 :])
    conf_tr, match_tr = greedy_sequences(profile, category, train)
    conf_te, match_te = greedy_sequences(profile, category, test)
    model = {
        "confidence": dist.fit_confidence(np.concatenate(conf_tr)),
        "confidence_given_previous": conditional_confidence(conf_tr, match_tr),
        "confidence_request_effect": dist.fit_confidence_request_effect(conf_tr),
        "joint": fit_joint(conf_tr, match_tr),
    }
    t = int(np.median([len(m) for m in match_te]))
    c_gen, m_gen = draw_streams(model, n_streams, t, rng)
    out = {
        "category": category,
        "split": split,
        "train_requests": len(train),
        "test_requests": len(test),
        "rate_test": float(np.concatenate(match_te).mean()),
        "rate_generated": float(m_gen.mean()),
    }
    c_sets, m_sets = draw_streams(model, sets * len(test), t, rng)
    set_rates = m_sets.reshape(sets, -1).mean(axis=1)
    out["rate_lo"], out["rate_hi"] = (float(v) for v in np.quantile(set_rates, [0.025, 0.975]))
    # the fit carries its own half's sampling error: two halves drawn from the model differ this much
    _, m_train = draw_streams(model, sets * len(train), t, rng)
    train_rates = m_train.reshape(sets, -1).mean(axis=1)
    diffs = set_rates - train_rates
    out["rate_train"] = float(np.concatenate(match_tr).mean())
    out["diff_lo"], out["diff_hi"] = (float(v) for v in np.quantile(diffs, [0.025, 0.975]))
    level_rates, level_pmfs = _level_curve(model, n_streams // 2, t, rng)
    for d in HELDOUT_LENGTHS:
        obs = np.bincount(accepted_at(match_te, d), minlength=d + 1)[: d + 1]
        pmf = _length_pmf(m_gen, d)
        stat, p, dof = dist.chi_square_gof(obs.astype(float), pmf, 0)
        out[f"chi2_d{d}"], out[f"chi2_pvalue_d{d}"], out[f"dof_d{d}"] = stat, p, dof
        sets_d = _set_histograms(m_sets, len(test), d)
        null = np.array([dist.chi_square_gof(h.astype(float), pmf, 0)[0] for h in sets_d])
        out[f"chi2_bootstrap_pvalue_d{d}"] = _pvalue(null, stat)
        # the same with the fit redone on each replicate's own training half, at its level
        refit = [
            dist.chi_square_gof(h.astype(float), _pmf_at(level_rates, level_pmfs[d], r), 0)[0]
            for h, r in zip(sets_d, train_rates, strict=True)
        ]
        out[f"chi2_refit_pvalue_d{d}"] = _pvalue(np.array(refit), stat)
    cal_gen = binned_calibration(c_gen.ravel(), m_gen.ravel())
    out["calibration_max_abs_diff"] = _calibration_gap(cal_gen, np.concatenate(conf_te), np.concatenate(match_te))
    # the same gap for held-out sets drawn from the model: ten bins of a half's positions are noisy
    per = len(test) * t
    gaps = [
        _calibration_gap(cal_gen, c, m)
        for c, m in zip(c_sets.reshape(sets, per), m_sets.reshape(sets, per), strict=True)
    ]
    out["calibration_max_abs_diff_hi"] = float(np.quantile(gaps, 0.95))
    out["ks_generated_vs_test_confidence"] = float(
        stats.ks_2samp(np.concatenate(conf_te), c_gen.ravel()[:200_000]).pvalue
    )
    return out


def _calibration_gap(curve: dict, conf: np.ndarray, match: np.ndarray) -> float:
    """Largest |observed - generated| match frequency over the observed set's confidence bins."""
    obs = binned_calibration(conf, match)
    return float(
        np.max(np.abs(np.interp(obs["confidence"], curve["confidence"], curve["frequency"]) - obs["frequency"]))
    )


# intercept shifts (log-odds) around the fit that span the levels a refit on another half can reach
LEVEL_SHIFTS = np.linspace(-1.0, 1.0, 17)


def _length_pmf(acc: np.ndarray, d: int) -> np.ndarray:
    h = _set_histograms(acc, acc.shape[0], d)[0]
    return h / h.sum()


def _level_curve(model: dict, n: int, t: int, rng: np.random.Generator) -> tuple[np.ndarray, dict]:
    """Generated acceptance rate and accepted-length pmfs (d in HELDOUT_LENGTHS) of the model with its intercept
    shifted by each of LEVEL_SHIFTS: what the model refitted to a half of another rate generates. The
    fit's dominant sampling error is the level (the request effect's mean); its shape parameters are
    kept. Common random numbers make the rate increase with the shift."""
    seed = int(rng.integers(2**63))
    rates, pmfs = [], {d: [] for d in HELDOUT_LENGTHS}
    for shift in LEVEL_SHIFTS:
        _, acc = draw_streams(model, n, t, np.random.default_rng(seed), shift=float(shift))
        rates.append(acc.mean())
        for d in pmfs:
            pmfs[d].append(_length_pmf(acc, d))
    return np.maximum.accumulate(np.array(rates)), {d: np.array(v) for d, v in pmfs.items()}


def _pmf_at(rates: np.ndarray, pmfs: np.ndarray, rate: float) -> np.ndarray:
    pmf = np.array([np.interp(rate, rates, pmfs[:, k]) for k in range(pmfs.shape[1])])
    return pmf / pmf.sum()


def _pvalue(null: np.ndarray, stat: float) -> float:
    return float((1 + np.sum(null >= stat)) / (1 + len(null)))


def _set_histograms(acc: np.ndarray, per_set: int, d: int) -> np.ndarray:
    """Accepted-length histograms at fixed d of consecutive groups of ``per_set`` streams."""
    r = replay_lengths(acc, fixed_lengths(acc.shape, d))
    owner = np.broadcast_to(np.arange(acc.shape[0]) // per_set, r["accepted"].shape)
    v = r["valid"]
    flat = owner[v] * (d + 1) + r["accepted"][v]
    n_sets = acc.shape[0] // per_set
    return np.bincount(flat, minlength=n_sets * (d + 1)).reshape(n_sets, d + 1)


def selection_table(models: list[dict]) -> pd.DataFrame:
    """The model-selection table of several acceptance models (``selection_rows`` of each)."""
    return pd.DataFrame([r for m in models for r in selection_rows(m)])
