from adsl.workflow import dse_schedule, run

run(snakemake, dse_schedule)  # noqa: F821 (injected by Snakemake)
