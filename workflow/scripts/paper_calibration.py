from adsl.workflow import paper_calibration, run

run(snakemake, paper_calibration)  # noqa: F821 (injected by Snakemake)
