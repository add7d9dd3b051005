from adsl.workflow import table

table(snakemake)  # noqa: F821 (injected by Snakemake)
