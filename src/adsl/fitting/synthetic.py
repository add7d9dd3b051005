"""A synthetic, schema-valid profile drawn from an acceptance model (for tests and demonstrations;
never a substitute for a measured profile)."""

from __future__ import annotations

import numpy as np
import pandas as pd

from adsl.fitting.generator import draw_streams
from adsl.profiling.replay import replay
from adsl.profiling.traces import Profile


def synthetic_profile(models: dict[str, dict], n_requests: int, t: int, d: int = 8, seed: int = 0) -> Profile:
    """A profile of ``n_requests`` greedy requests per category, drawn from ``models`` and replayed at fixed d."""
    rng = np.random.default_rng(seed)
    req, steps, drafts, positions = [], [], [], []
    rid = 0
    for category, model in models.items():
        conf, acc = draw_streams(model, n_requests, t + d + 1, rng)
        for r in range(n_requests):
            c, m = conf[r].astype(float), acc[r]
            st = replay(m[:t], np.full(t, d))
            generated = int(st.emitted.sum())
            req.append(
                dict(
                    request_id=rid,
                    dataset="synthetic",
                    category=category,
                    source_category=category,
                    question_id=str(r),
                    mode="greedy",
                    temperature=1.0,
                    seed=seed,
                    d_max=d,
                    draft_model="synthetic-draft",
                    target_model="synthetic-target",
                    prompt_len=100,
                    generated_len=generated,
                    wall_time_s=0.0,
                    versions="{}",
                )
            )
            for s in st.itertuples():
                steps.append(
                    dict(
                        request_id=rid,
                        step=s.step,
                        context_len=100 + s.start,
                        drafted=s.drafted,
                        accepted=s.accepted,
                        emitted=s.emitted,
                    )
                )
                for j in range(s.drafted):
                    q = float(c[s.start + j])
                    drafts.append(
                        dict(
                            request_id=rid,
                            step=s.step,
                            pos=j + 1,
                            q_token=q,
                            p_token=q,
                            accept_prob=1.0,
                            beta=q,
                            draft_entropy=0.0,
                            accepted=j < s.accepted,
                        )
                    )
            n = generated
            positions.append(
                pd.DataFrame(
                    dict(request_id=rid, pos=np.arange(n), match=m[:n], beta=c[:n], draft_top1=c[:n], draft_entropy=0.0)
                )
            )
            rid += 1
    return Profile(
        pd.DataFrame(req), pd.DataFrame(steps), pd.DataFrame(drafts), pd.concat(positions, ignore_index=True)
    )
