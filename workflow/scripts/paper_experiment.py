from adsl.workflow import paper_experiment, run

run(snakemake, paper_experiment)  # noqa: F821 (injected by Snakemake)
