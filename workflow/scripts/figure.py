from adsl.workflow import figure, run

run(snakemake, figure)  # noqa: F821 (injected by Snakemake)
