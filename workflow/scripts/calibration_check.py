from adsl.workflow import calibration_check, run

run(snakemake, calibration_check)  # noqa: F821 (injected by Snakemake)
