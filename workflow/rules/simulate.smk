SIM = config["simulation"]


def experiment_models(wc):
    pair = SIM["experiments"][wc.experiment]["pair"]
    return expand(
        "results/acceptance/{pair}/{category}.json",
        pair=pair,
        category=SIM["categories"],
    )


rule experiment:
    input:
        models=experiment_models,
    output:
        "results/experiments/{experiment}.parquet",
    wildcard_constraints:
        experiment="|".join(SIM["experiments"]) or "none",
    resources:
        mem_mb=8000,
        runtime=60,
        cpus_per_task=1,
    params:
        step="experiment",
        basedir=BASEDIR,
        settings=lambda wc: [
            SIM["experiments"][wc.experiment],
            {k: v for k, v in SIM.items() if k != "experiments"},
        ],
    script:
        "../scripts/fitting.py"


rule experiment_table:
    input:
        experiment="results/experiments/{experiment}.parquet",
    output:
        csv="results/simulation/{experiment}.csv",
    resources:
        mem_mb=2000,
        runtime=10,
        cpus_per_task=1,
    params:
        name=lambda wc: wc.experiment,
        basedir=BASEDIR,
    script:
        "../scripts/table.py"
