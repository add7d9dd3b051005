# Stage 3: the simulator's experiments (adsl.sim.experiment) and the attribution study.
rule experiment:
    input:
        unpack(experiment_files),
        catalogues=catalogue_files(),
    output:
        rows=paths.experiment("{experiment}"),
    log:
        "logs/experiment/{experiment}.log",
    benchmark:
        "logs/benchmarks/experiment/{experiment}.tsv"
    wildcard_constraints:
        experiment="|".join(SIM["experiments"]) or "none",
    priority: 10
    conda:
        "../envs/adsl.yaml"
    resources:
        mem_mb=8000,
        runtime=60,
        cpus_per_task=1,
    params:
        simulation=lambda wc: simulation_params(
            experiments={wc.experiment: SIM["experiments"][wc.experiment]}
        ),
        seed=config["seed"],
    script:
        "../scripts/experiment.py"


MAIN = SETTINGS.simulation.experiments.get("main")


rule attribution_step:
    input:
        **(experiment_inputs(MAIN.systems, MAIN.pairs) if MAIN else {}),
        catalogues=catalogue_files(),
    output:
        rows=paths.attribution_step("{step}"),
    log:
        "logs/attribution/step{step}.log",
    benchmark:
        "logs/benchmarks/attribution/step{step}.tsv"
    wildcard_constraints:
        step=r"\d+",
    priority: 10
    conda:
        "../envs/adsl.yaml"
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
    script:
        "../scripts/attribution_step.py"
