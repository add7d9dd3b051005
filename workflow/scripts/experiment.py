from adsl.workflow import experiment, run

run(snakemake, experiment)  # noqa: F821 (injected by Snakemake)
