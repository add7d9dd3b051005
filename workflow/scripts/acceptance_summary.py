from adsl.workflow import acceptance_summary, run

run(snakemake, acceptance_summary)  # noqa: F821 (injected by Snakemake)
