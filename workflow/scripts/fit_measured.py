from adsl.workflow import fit_measured, run

run(snakemake, fit_measured)  # noqa: F821 (injected by Snakemake)
