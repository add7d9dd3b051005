# Paper mode (`snakemake paper --cores 2`; adsl.paper, docs/reproduction.md): the paper's configuration
# (config/paper.yaml) laid over the default, its unstated constants calibrated to the paper's training figures,
# every evaluation figure recomputed under it, the reproduction table, the assumption ledger with its
# waterfall, and the pipeline puzzle's decomposition. Nothing of the default run reads these files.
rule paper_calibration:
    input:
        ancient(COMPILED),
        models=paths.pair_models(PAIR_66B, SIM["categories"]),
        tau=paths.TAU,
        catalogues=catalogue_files(),
        paper=PAPER_FILE,
        training=paper_training,
    output:
        table="results/paper/calibration.csv",
        residuals="results/paper/calibration_residuals.csv",
        figures="results/paper/calibration_figures.csv",
        constants=PAPER_CONSTANTS,
    log:
        "logs/paper/calibration.log",
    benchmark:
        "logs/benchmarks/paper/calibration.tsv"
    priority: 20
    conda:
        "../envs/adsl.yaml"
    resources:
        mem_mb=8000,
        runtime=60,
        cpus_per_task=1,
    params:
        simulation=simulation_params(
            experiments={k: SIM["experiments"][k] for k in TRAINING_EXPERIMENTS}
        ),
        seed=config["seed"],
    script:
        "../scripts/paper_calibration.py"


rule paper_experiment:
    input:
        ancient(COMPILED),
        unpack(experiment_files),
        catalogues=catalogue_files(),
        paper=PAPER_FILE,
        constants=PAPER_CONSTANTS,
    output:
        rows="results/paper/experiments/{experiment}.parquet",
    log:
        "logs/paper/experiment/{experiment}.log",
    wildcard_constraints:
        experiment="|".join(PAPER_EXPERIMENTS) or "none",
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
        "../scripts/paper_experiment.py"


for spec in (REG.tables[n] for n in PAPER_TABLES):

    rule:
        name:
            f"paper_table_{spec.name}"
        input:
            unpack(lambda wc, spec=spec: paper_table_inputs(spec)),
            catalogues=catalogue_files(),
            paper=PAPER_FILE,
            constants=PAPER_CONSTANTS,
        output:
            csv=paper_path(spec.path),
        log:
            f"logs/paper/tables/{spec.name}.log",
        conda:
            "../envs/adsl.yaml"
        resources:
            mem_mb=2000,
            runtime=10,
            cpus_per_task=1,
        params:
            table=spec.name,
            settings=sections(sorted({*spec.reads, "simulation", "seed"})),
            options=dict(spec.options),
            extensions=config["extensions"],
        script:
            "../scripts/paper_table.py"


rule paper_figure:
    input:
        catalogues=catalogue_files(),
        source=lambda wc: paper_path(REG.table_of(wc.name).path),
        paper=PAPER_FILE,
        constants=PAPER_CONSTANTS,
    output:
        pdf="figures/paper/{name}.pdf",
        png="figures/paper/{name}.png",
        csv="results/paper/figures/{name}.csv",
    log:
        "logs/paper/figures/{name}.log",
    wildcard_constraints:
        name="|".join(PAPER_FIGURES),
    conda:
        "../envs/adsl.yaml"
    resources:
        mem_mb=2000,
        runtime=10,
        cpus_per_task=1,
    params:
        settings=lambda wc: sections(
            sorted({*REG.figures[wc.name].reads, "simulation", "seed"})
        ),
        extensions=config["extensions"],
    script:
        "../scripts/paper_figure.py"


rule paper_reproduction:
    input:
        default_tables=[REG.tables[n].path for n in PAPER_TABLES],
        paper_tables=[paper_path(REG.tables[n].path) for n in PAPER_TABLES],
        default_experiments=[paths.experiment(e) for e in TRAINING_EXPERIMENTS],
        paper_experiments=[
            paper_path(paths.experiment(e)) for e in TRAINING_EXPERIMENTS
        ],
        training=paper_training,
    output:
        reproduction="results/paper/reproduction.csv",
    log:
        "logs/paper/reproduction.log",
    conda:
        "../envs/adsl.yaml"
    resources:
        mem_mb=2000,
        runtime=10,
        cpus_per_task=1,
    params:
        names=list(PAPER_TABLES),
        draft_length=SIM["draft_length"],
    script:
        "../scripts/paper_reproduction.py"


MAIN_PAIRS = SIM["experiments"]["main"]["pairs"] if "main" in SIM["experiments"] else []


rule paper_ledger:
    input:
        ancient(COMPILED),
        models=paths.pair_models(MAIN_PAIRS, SIM["categories"]),
        tau=paths.TAU,
        catalogues=catalogue_files(),
        paper=PAPER_FILE,
        constants=PAPER_CONSTANTS,
    output:
        ledger="results/paper/ledger.csv",
    log:
        "logs/paper/ledger.log",
    conda:
        "../envs/adsl.yaml"
    resources:
        mem_mb=8000,
        runtime=60,
        cpus_per_task=1,
    params:
        simulation=simulation_params(experiments={"main": SIM["experiments"]["main"]}),
        seed=config["seed"],
    script:
        "../scripts/paper_ledger.py"


rule paper_waterfall:
    input:
        ancient(COMPILED),
        models=paths.pair_models(MAIN_PAIRS, SIM["categories"]),
        tau=paths.TAU,
        catalogues=catalogue_files(),
        paper=PAPER_FILE,
        constants=PAPER_CONSTANTS,
    output:
        pdf="figures/paper/waterfall.pdf",
        png="figures/paper/waterfall.png",
        csv="results/paper/waterfall.csv",
    log:
        "logs/paper/waterfall.log",
    conda:
        "../envs/adsl.yaml"
    resources:
        mem_mb=8000,
        runtime=60,
        cpus_per_task=1,
    params:
        simulation=simulation_params(experiments={"main": SIM["experiments"]["main"]}),
        seed=config["seed"],
    script:
        "../scripts/paper_waterfall.py"


rule paper_pipeline:
    input:
        ancient(COMPILED),
        models=paths.pair_models(PAIR_66B, SIM["categories"]),
        tau=paths.TAU,
        catalogues=catalogue_files(),
        paper=PAPER_FILE,
        constants=PAPER_CONSTANTS,
    output:
        puzzle="results/paper/pipeline_puzzle.csv",
    log:
        "logs/paper/pipeline.log",
    conda:
        "../envs/adsl.yaml"
    resources:
        mem_mb=8000,
        runtime=30,
        cpus_per_task=1,
    params:
        simulation=simulation_params(experiments={"main": SIM["experiments"]["main"]}),
        seed=config["seed"],
    script:
        "../scripts/paper_pipeline.py"


rule paper:
    input:
        "results/paper/calibration.csv",
        "results/paper/reproduction.csv",
        "results/paper/ledger.csv",
        "results/paper/pipeline_puzzle.csv",
        "figures/paper/waterfall.pdf",
        [f for name in PAPER_FIGURES for f in paper_figure_files(name)],
    localrule: True
