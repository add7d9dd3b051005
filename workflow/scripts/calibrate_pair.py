from adsl.workflow import calibrate_pair, run

run(snakemake, calibrate_pair)  # noqa: F821 (injected by Snakemake)
