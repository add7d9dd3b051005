"""Maximum-likelihood fits of the pieces of acceptance behaviour, with AIC model selection,
goodness of fit and bootstrap confidence intervals. Arrays in, plain dicts out.
"""

from __future__ import annotations

import numpy as np
from scipy import optimize, special, stats

from adsl.errors import AdslError
from adsl.progress import progress

EPS = 1e-6


class FitError(AdslError, ValueError):
    """Too few samples or unusable data for a fit; the message gives the count."""


def need(n: int, minimum: int, what: str) -> None:
    """Raise FitError when the fit of ``what`` has fewer than ``minimum`` samples."""
    if n < minimum:
        raise FitError(f"{what}: {n} samples, the fit needs at least {minimum}")


def clip01(x) -> np.ndarray:
    """``x`` as floats kept EPS inside (0, 1), so logits and log-densities stay finite."""
    return np.clip(np.asarray(x, dtype=float), EPS, 1 - EPS)


def aic(loglik: float, k: int) -> float:
    """Akaike information criterion of a fit with log-likelihood ``loglik`` and ``k`` parameters."""
    return 2 * k - 2 * loglik


# ---------------------------------------------------------------- confidence distribution
def _beta_fit(x):
    a, b, _, _ = stats.beta.fit(x, floc=0, fscale=1)
    return {"a": float(a), "b": float(b)}, float(stats.beta.logpdf(x, a, b).sum())


def _logitnormal_fit(x):
    z = special.logit(x)
    mu, sd = float(z.mean()), float(z.std())
    ll = float((stats.norm.logpdf(z, mu, sd) - np.log(x * (1 - x))).sum())
    return {"mu": mu, "sigma": sd}, ll


def _log_terms(x) -> tuple[np.ndarray, np.ndarray]:
    """log x and log(1 - x) as ``stats.beta.logpdf`` computes them (``xlogy`` / ``xlog1py``)."""
    return special.xlogy(1.0, x), special.xlog1py(1.0, -x)


def _mixture_logpdf(logs, w, a, b):
    """Log-density of the mixture at the points whose ``_log_terms`` are ``logs``: ``stats.beta.logpdf``'s
    and ``special.logsumexp``'s own arithmetic in their order (equal to the bit), without their argument
    checks and broadcasting, which took 95 % of a likelihood evaluation."""
    lx, l1x = logs
    parts = [
        np.log(wi) + (((bi - 1.0) * l1x + (ai - 1.0) * lx) - special.betaln(ai, bi))
        for wi, ai, bi in zip(w, a, b, strict=True)
    ]
    return _logsumexp0(np.array(parts))


def _logsumexp0(a: np.ndarray) -> np.ndarray:
    """``special.logsumexp(a, axis=0)`` for real ``a``: the largest term kept out of the sum (ties count
    once each), log1p of the rest's exponentials relative to it."""
    a_max = a.max(axis=0, keepdims=True)
    top = a == a_max
    m = top.sum(axis=0, keepdims=True, dtype=a.dtype)
    s = np.exp(np.where(top, -np.inf, a) - a_max).sum(axis=0, keepdims=True)
    s = np.where(s == 0, s, s / m)
    return (np.log1p(s) + np.log(m) + a_max)[0]


def _mixture_unpack(t, k):
    w = special.softmax(np.concatenate([[0.0], t[: k - 1]]))
    ab = np.exp(np.clip(t[k - 1 :], -8, 12)).reshape(k, 2)
    return w, ab[:, 0], ab[:, 1]


def _mixture_fit(x, k: int = 2, start: dict | None = None):
    """k-component Beta mixture by maximum likelihood (Nelder-Mead on log / softmax parameters);
    components are reported in order of their mean."""
    if start is None:
        parts = np.array_split(np.sort(x), k)
        s = [_beta_fit(part)[0] for part in parts]
        theta0 = np.concatenate([np.zeros(k - 1), np.log([[c["a"], c["b"]] for c in s]).ravel()])
    else:  # warm start (bootstrap resamples start from the full-data estimate)
        w0 = np.asarray(start["w"])
        theta0 = np.concatenate([np.log(w0[1:] / w0[0]), np.log(np.c_[start["a"], start["b"]]).ravel()])

    logs = _log_terms(x)

    def nll(t):
        return -_mixture_logpdf(logs, *_mixture_unpack(t, k)).sum()

    opts = {"maxiter": 4000 * k, "xatol": 1e-6, "fatol": 1e-8}
    res = optimize.minimize(nll, theta0, method="Nelder-Mead", options=opts)
    w, a, b = _mixture_unpack(res.x, k)
    order = np.argsort(a / (a + b))
    return {"w": w[order].tolist(), "a": a[order].tolist(), "b": b[order].tolist()}, float(-res.fun)


CONFIDENCE_MODELS = {
    "beta": (_beta_fit, 2),
    "beta_mixture": (lambda x, **kw: _mixture_fit(x, 2, **kw), 5),
    # a third component captures the spike of draft confidences just below 1 that real profiles show
    "beta_mixture3": (lambda x, **kw: _mixture_fit(x, 3, **kw), 8),
    "logit_normal": (_logitnormal_fit, 2),
}


def confidence_cdf(model: str, params: dict, x) -> np.ndarray:
    """CDF at ``x`` of a fitted confidence model (beta, logit-normal or beta mixture)."""
    x = clip01(x)
    if model == "beta":
        return stats.beta.cdf(x, params["a"], params["b"])
    if model == "logit_normal":
        return stats.norm.cdf(special.logit(x), params["mu"], params["sigma"])
    p = params
    return sum(w * stats.beta.cdf(x, a, b) for w, a, b in zip(p["w"], p["a"], p["b"], strict=True))


def confidence_ppf(model: str, params: dict, u) -> np.ndarray:
    """Quantiles (for QQ plots); the mixture inverts its CDF numerically on a grid."""
    u = np.asarray(u, dtype=float)
    if model == "beta":
        return stats.beta.ppf(u, params["a"], params["b"])
    if model == "logit_normal":
        return special.expit(stats.norm.ppf(u, params["mu"], params["sigma"]))
    grid = np.concatenate([[0.0], np.logspace(-8, 0, 4000)[:-1], 1 - np.logspace(-8, -0.31, 4000)[::-1], [1.0]])
    grid = np.unique(np.clip(grid, 0, 1))
    return np.interp(u, confidence_cdf(model, params, grid), grid)


MIN_CONFIDENCE_SAMPLES = 50


def fit_confidence(x, bootstrap: int = 0, rng: np.random.Generator | None = None) -> dict:
    """Fit every candidate by maximum likelihood, select by AIC, test the winner with Kolmogorov-Smirnov."""
    x = clip01(x)
    need(len(x), MIN_CONFIDENCE_SAMPLES, "confidence distribution")
    cands = {}
    for name, (fit, k) in CONFIDENCE_MODELS.items():
        params, ll = fit(x)
        cands[name] = {"params": params, "loglik": ll, "k": k, "aic": aic(ll, k)}
    best = min(cands, key=lambda n: cands[n]["aic"])
    ks = stats.kstest(x, lambda v: confidence_cdf(best, cands[best]["params"], v))
    out = {"selected": best, "candidates": cands, "ks_statistic": float(ks.statistic), "ks_pvalue": float(ks.pvalue)}
    if bootstrap:
        rng = rng or np.random.default_rng(0)
        fit = CONFIDENCE_MODELS[best][0]
        kw = {"start": cands[best]["params"]} if best.startswith("beta_mixture") else {}
        resamples = progress(range(bootstrap), "confidence fit: bootstrap resample")
        draws = [_flat(fit(x[rng.integers(0, len(x), len(x))], **kw)[0]) for _ in resamples]
        out["ci95"] = {k: [float(np.quantile([d[k] for d in draws], q)) for q in (0.025, 0.975)] for k in draws[0]}
    return out


def _flat(params: dict) -> dict:
    """Mixture parameter lists as scalar entries (w1, a1, b1, w2, ...) for confidence intervals."""
    out = {}
    for key, value in params.items():
        if isinstance(value, list):
            out.update({f"{key}{i + 1}": v for i, v in enumerate(value)})
        else:
            out[key] = value
    return out


# ---------------------------------------------------------------- heterogeneity over requests
def fit_request_heterogeneity(matches: np.ndarray, trials: np.ndarray) -> dict:
    """Beta over requests (beta-binomial) vs one shared rate (binomial): MLE, LR test, AIC."""
    k, n = np.asarray(matches), np.asarray(trials)
    need(len(k), 5, "request heterogeneity (requests)")
    p = k.sum() / n.sum()
    ll_binom = float(stats.binom.logpmf(k, n, p).sum())

    def nll(t):
        a, b = np.exp(t)
        return -stats.betabinom.logpmf(k, n, a, b).sum()

    m = np.clip(k / n, 0.01, 0.99)
    var = max(m.var(), 1e-4)
    common = max(m.mean() * (1 - m.mean()) / var - 1, 0.5)
    res = optimize.minimize(nll, np.log([m.mean() * common, (1 - m.mean()) * common]), method="Nelder-Mead")
    a, b = (float(v) for v in np.exp(res.x))
    ll_bb = float(-res.fun)
    lr = max(0.0, 2 * (ll_bb - ll_binom))
    return {
        "a": a,
        "b": b,
        "mean_rate": a / (a + b),
        "binomial_rate": float(p),
        "loglik": {"binomial": ll_binom, "beta_binomial": ll_bb},
        "aic": {"binomial": aic(ll_binom, 1), "beta_binomial": aic(ll_bb, 2)},
        "lr_statistic": lr,
        # the null lies on the boundary of the parameter space: chi-bar-squared, half of chi2(1)
        "lr_pvalue": float(0.5 * stats.chi2.sf(lr, 1)) if lr > 0 else 1.0,
        "requests": int(len(k)),
    }


# ---------------------------------------------------------------- dependence along a draft
def fit_dependence(sequences: list[np.ndarray]) -> dict:
    """First-order Markov chain vs independent Bernoulli trials for the match sequences; LR test (1 df)."""
    prev = np.concatenate([s[:-1] for s in sequences if len(s) > 1]).astype(bool)
    cur = np.concatenate([s[1:] for s in sequences if len(s) > 1]).astype(bool)
    need(len(cur), 50, "dependence along a draft (transitions)")

    def ll_bern(x):
        p = np.clip(x.mean(), EPS, 1 - EPS) if len(x) else 0.5
        return float(x.sum() * np.log(p) + (len(x) - x.sum()) * np.log1p(-p)), float(p)

    ll0, p = ll_bern(cur)
    ll11, p11 = ll_bern(cur[prev])
    ll01, p01 = ll_bern(cur[~prev])
    lr = max(0.0, 2 * (ll11 + ll01 - ll0))
    return {
        "p_match": p,
        "p_match_after_match": p11,
        "p_match_after_miss": p01,
        "lr_statistic": lr,
        "lr_pvalue": float(stats.chi2.sf(lr, 1)),
        "aic": {"independent": aic(ll0, 1), "markov": aic(ll11 + ll01, 2)},
        "selected": "markov" if aic(ll11 + ll01, 2) < aic(ll0, 1) else "independent",
        "transitions": int(len(cur)),
    }


# ---------------------------------------------------------------- accepted length at fixed d
def truncated_geometric_pmf(alpha: float, d: int) -> np.ndarray:
    """P(accepted = k), k = 0..d, when each draft token is accepted independently with probability ``alpha``."""
    k = np.arange(d + 1)
    pmf = (1 - alpha) * alpha**k
    pmf[d] = alpha**d
    return pmf


def beta_geometric_pmf(a: float, b: float, d: int) -> np.ndarray:
    """P(accepted = k), k = 0..d, when each step's acceptance probability is drawn from Beta(a, b)."""
    k = np.arange(d + 1)
    lb = special.betaln(a, b)
    pmf = np.exp(special.betaln(a + k, b + 1) - lb)
    pmf[d] = np.exp(special.betaln(a + d, b) - lb)
    return pmf


def chi_square_gof(counts: np.ndarray, pmf: np.ndarray, n_params: int) -> tuple[float, float, int]:
    """Pearson chi-square with adjacent bins pooled until every expected count is >= 5."""
    n = counts.sum()
    obs, exp = [], []
    o_acc = e_acc = 0.0
    for o, e in zip(counts, pmf * n, strict=True):
        o_acc, e_acc = o_acc + o, e_acc + e
        if e_acc >= 5:
            obs.append(o_acc)
            exp.append(e_acc)
            o_acc = e_acc = 0.0
    if e_acc > 0 and exp:
        obs[-1] += o_acc
        exp[-1] += e_acc
    dof = len(obs) - 1 - n_params
    if dof < 1:
        return float("nan"), float("nan"), dof
    stat = float(((np.array(obs) - np.array(exp)) ** 2 / np.array(exp)).sum())
    return stat, float(stats.chi2.sf(stat, dof)), dof


def fit_accepted_length(accepted: np.ndarray, d: int) -> dict:
    """Accepted tokens per verification at fixed draft length d: truncated geometric (i.i.d.
    acceptance) vs beta-geometric (acceptance varying from step to step)."""
    acc = np.asarray(accepted, dtype=int)
    need(len(acc), 30, f"accepted length at d = {d} (verification steps)")
    counts = np.bincount(acc, minlength=d + 1)[: d + 1].astype(float)
    k = np.arange(d + 1)
    # truncated geometric MLE: successes / (successes + failures) with failures = steps with k < d
    alpha = float(np.clip((counts * k).sum() / ((counts * k).sum() + counts[:d].sum()), EPS, 1 - EPS))
    ll_tg = float((counts * np.log(truncated_geometric_pmf(alpha, d))).sum())

    def nll(t):
        return -(counts * np.log(np.clip(beta_geometric_pmf(*np.exp(t), d), 1e-300, None))).sum()

    res = optimize.minimize(nll, np.log([alpha * 4, (1 - alpha) * 4]), method="Nelder-Mead")
    a, b = (float(v) for v in np.exp(res.x))
    ll_bg = float(-res.fun)
    out = {"d": d, "steps": int(len(acc)), "counts": counts.astype(int).tolist()}
    for name, pmf, npar, ll in (
        ("truncated_geometric", truncated_geometric_pmf(alpha, d), 1, ll_tg),
        ("beta_geometric", beta_geometric_pmf(a, b, d), 2, ll_bg),
    ):
        stat, pval, dof = chi_square_gof(counts, pmf, npar)
        out[name] = {"loglik": ll, "aic": aic(ll, npar), "chi2": stat, "chi2_pvalue": pval, "dof": dof}
    out["truncated_geometric"]["alpha"] = alpha
    out["beta_geometric"].update(a=a, b=b)
    out["selected"] = min(("truncated_geometric", "beta_geometric"), key=lambda m: out[m]["aic"])
    return out


def fit_confidence_request_effect(confidence: list[np.ndarray]) -> dict:
    """How much of the confidence's spread is between requests: a Gaussian-copula random intercept.

    Every confidence gets its normal score (rank in the pooled sample -> standard normal quantile);
    rho is the between-request share of the scores' variance by the one-way ANOVA estimator (between
    variance of request means less their sampling variance). Drawing a request's scores as
    sqrt(1 - rho) Z + sqrt(rho) W (W per request) keeps the fitted marginal distribution exactly and
    gives requests their own, higher or lower, confidence levels."""
    need(len(confidence), 3, "confidence request effect (requests)")
    sizes = np.array([len(c) for c in confidence])
    need(int(sizes.min()), 2, "confidence request effect (positions of the shortest request)")
    pooled = clip01(np.concatenate(confidence))
    score = special.ndtri(stats.rankdata(pooled) / (len(pooled) + 1))
    parts = np.split(score, np.cumsum(sizes)[:-1])
    means = np.array([p.mean() for p in parts])
    within = np.array([p.var(ddof=1) for p in parts])
    between = max(float(means.var(ddof=1) - np.mean(within / sizes)), 0.0)
    rho = min(between / float(score.var()), 0.99) if score.var() > 0 else 0.0
    return {"rho": rho, "requests": int(len(confidence)), "method": "normal-score random intercept (ANOVA)"}
