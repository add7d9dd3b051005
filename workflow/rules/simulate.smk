SIM = config["simulation"]
ADAPTIVE = {"SADDLE-d", "SADDLE-p", "SADDLE-s", "SADDLE"}


def experiment_pairs(exp):
    return exp.get("pairs") or [exp["pair"]]


def experiment_inputs(wc):
    exp = SIM["experiments"][wc.experiment]
    out = {
        "models": expand(
            "results/acceptance/{pair}/{category}.json",
            pair=experiment_pairs(exp),
            category=SIM["categories"],
        )
    }
    if ADAPTIVE & set(exp["systems"]):
        out["tau"] = "results/acceptance/tau.csv"
    return out


rule experiment:
    input:
        unpack(experiment_inputs),
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
            {
                k: v
                for k, v in SIM.items()
                if k not in ("experiments", "attribution", "timeline")
            },
        ],
    script:
        "../scripts/fitting.py"


rule simulation_table:
    input:
        experiment=lambda wc: f"results/experiments/{SIMULATION_TABLES[wc.table]}.parquet",
    output:
        csv="results/simulation/{table}.csv",
    wildcard_constraints:
        table="|".join(SIMULATION_TABLES),
    resources:
        mem_mb=2000,
        runtime=10,
        cpus_per_task=1,
    params:
        name=lambda wc: wc.table,
        basedir=BASEDIR,
    script:
        "../scripts/table.py"


rule paper_comparison:
    input:
        experiment="results/experiments/main.parquet",
        headlines=str(resolve_input("data/paper_headlines.csv")),
    output:
        csv="results/paper_comparison.csv",
    resources:
        mem_mb=2000,
        runtime=10,
        cpus_per_task=1,
    params:
        name="paper_comparison",
        basedir=BASEDIR,
    script:
        "../scripts/table.py"


rule batching_table:
    input:
        continuous="results/experiments/main.parquet",
        static="results/experiments/main_static.parquet",
    output:
        csv="results/simulation/batching.csv",
    resources:
        mem_mb=2000,
        runtime=10,
        cpus_per_task=1,
    params:
        name="batching",
        basedir=BASEDIR,
    script:
        "../scripts/table.py"


rule timeline_table:
    input:
        models=expand(
            "results/acceptance/{pair}/{category}.json",
            pair=SIM["timeline"]["pair"],
            category=SIM["categories"],
        ),
        tau="results/acceptance/tau.csv",
    output:
        csv="results/simulation/timeline.csv",
    resources:
        mem_mb=2000,
        runtime=10,
        cpus_per_task=1,
    params:
        name="timeline",
        basedir=BASEDIR,
        settings=SIM["timeline"],
    script:
        "../scripts/table.py"


ATTRIBUTION = SIM["attribution"]


rule attribution_step:
    input:
        unpack(lambda wc: experiment_inputs(SimpleNamespace(experiment="main"))),
    output:
        "results/attribution/step{step}.parquet",
    wildcard_constraints:
        step=r"\d+",
    resources:
        mem_mb=8000,
        runtime=60,
        cpus_per_task=1,
    params:
        step="attribution_step",
        basedir=BASEDIR,
        settings=lambda wc: [
            ATTRIBUTION[: int(wc.step) + 1],
            {
                k: v
                for k, v in SIM.items()
                if k not in ("experiments", "attribution", "timeline")
            },
        ],
    script:
        "../scripts/fitting.py"


rule attribution_table:
    input:
        steps=expand(
            "results/attribution/step{step}.parquet", step=range(len(ATTRIBUTION))
        ),
        headlines=str(resolve_input("data/paper_headlines.csv")),
    output:
        csv="results/simulation/fidelity_attribution.csv",
    resources:
        mem_mb=2000,
        runtime=10,
        cpus_per_task=1,
    params:
        name="fidelity_attribution",
        basedir=BASEDIR,
        settings=ATTRIBUTION,
    script:
        "../scripts/table.py"


rule layouts_table:
    input:
        tensor_parallel="results/experiments/main.parquet",
        pipeline="results/experiments/layout_pipeline.parquet",
    output:
        csv="results/simulation/layouts.csv",
    resources:
        mem_mb=2000,
        runtime=10,
        cpus_per_task=1,
    params:
        name="layouts",
        basedir=BASEDIR,
    script:
        "../scripts/table.py"
