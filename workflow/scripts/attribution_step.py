from adsl.workflow import attribution_step, run

run(snakemake, attribution_step)  # noqa: F821 (injected by Snakemake)
