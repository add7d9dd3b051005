# Stage 3: the simulator's experiments (adsl.sim.experiment) and the attribution study.
COMPILED = "logs/compile_simulator/record.csv"


# numba compiles the loops in the first process that runs them and caches the code beside the package:
# one job compiles them, beside the fits, instead of the first simulation jobs each compiling them at once.
# Its record is an unnamed ancient() input of the jobs that simulate: it orders them, their functions do
# not see it, and a rerun of this job (a changed setting) does not rerun them.
rule compile_simulator:
    input:
        catalogues=catalogue_files(),
    output:
        record=COMPILED,
    log:
        "logs/compile_simulator/compile_simulator.log",
    benchmark:
        "logs/benchmarks/compile_simulator.tsv"
    priority: 30
    conda:
        "../envs/adsl.yaml"
    resources:
        mem_mb=2000,
        runtime=10,
        cpus_per_task=1,
    params:
        pair=sorted(ACC["pairs"])[0],
        simulation=simulation_params(),
        seed=config["seed"],
    script:
        "../scripts/compile_simulator.py"


rule experiment:
    input:
        ancient(COMPILED),
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
        ancient(COMPILED),
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
