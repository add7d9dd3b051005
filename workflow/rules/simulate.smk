# Stage 3: the simulator's experiments (adsl.sim.experiment) and the attribution study.
def experiment_inputs(systems, pairs):
    """Acceptance models of the pairs, tau when a system drafts adaptively, and the catalogues."""
    out = {"models": paths.pair_models(pairs, SIM["categories"])}
    if adaptive(systems):
        out["tau"] = paths.TAU
    return out


def simulation_params(**keep):
    """The simulation settings an experiment reads: all but the other experiments, the attribution
    steps and the timeline figure's (so editing one experiment reruns that experiment alone).
    """
    base = {
        k: v
        for k, v in SIM.items()
        if k not in ("experiments", "attribution", "timeline")
    }
    return {**base, **keep}


def _experiment(wc):
    return SETTINGS.simulation.experiments[wc.experiment]


rule experiment:
    input:
        catalogue_files(),
        unpack(
            lambda wc: experiment_inputs(
                _experiment(wc).systems, _experiment(wc).pairs
            )
        ),
    output:
        rows=paths.experiment("{experiment}"),
    log:
        "logs/experiment/{experiment}.log",
    benchmark:
        "logs/benchmarks/experiment/{experiment}.tsv"
    wildcard_constraints:
        experiment="|".join(SIM["experiments"]) or "none",
    resources:
        mem_mb=8000,
        runtime=60,
        cpus_per_task=1,
    params:
        simulation=lambda wc: simulation_params(
            experiments={wc.experiment: SIM["experiments"][wc.experiment]}
        ),
        seed=config["seed"],
        catalogues=config["catalogues"],
        basedir=BASEDIR,
    script:
        "../scripts/experiment.py"


MAIN = SETTINGS.simulation.experiments.get("main")


rule attribution_step:
    input:
        catalogue_files(),
        **(experiment_inputs(MAIN.systems, MAIN.pairs) if MAIN else {}),
    output:
        rows=paths.attribution_step("{step}"),
    log:
        "logs/attribution/step{step}.log",
    benchmark:
        "logs/benchmarks/attribution/step{step}.tsv"
    wildcard_constraints:
        step=r"\d+",
    resources:
        mem_mb=8000,
        runtime=60,
        cpus_per_task=1,
    params:
        simulation=lambda wc: simulation_params(
            experiments={"main": SIM["experiments"]["main"]},
            attribution=SIM["attribution"][: int(wc.step) + 1],
        ),
        seed=config["seed"],
        catalogues=config["catalogues"],
        basedir=BASEDIR,
    script:
        "../scripts/attribution_step.py"
