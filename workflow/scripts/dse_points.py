from adsl.workflow import dse_points, run

run(snakemake, dse_points)  # noqa: F821 (injected by Snakemake)
