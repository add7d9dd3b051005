from adsl.workflow import offline_models

offline_models(snakemake)  # noqa: F821 (injected by Snakemake)
