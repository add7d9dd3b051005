from adsl.workflow import run, tau_table

run(snakemake, tau_table)  # noqa: F821 (injected by Snakemake)
