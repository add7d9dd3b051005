from adsl.workflow import gallery, run

run(snakemake, gallery)  # noqa: F821 (injected by Snakemake)
