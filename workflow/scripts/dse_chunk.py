from adsl.workflow import dse_chunk, run

run(snakemake, dse_chunk)  # noqa: F821 (injected by Snakemake)
