from adsl.workflow import offline_models, run

run(snakemake, offline_models)  # noqa: F821 (injected by Snakemake)
