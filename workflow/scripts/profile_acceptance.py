from adsl.workflow import profile, run

run(snakemake, profile)  # noqa: F821 (injected by Snakemake)
