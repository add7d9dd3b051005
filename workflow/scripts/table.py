from adsl.workflow import run, table

run(snakemake, table)  # noqa: F821 (injected by Snakemake)
