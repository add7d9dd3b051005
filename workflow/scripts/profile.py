from adsl.workflow import profile

profile(snakemake)  # noqa: F821 (injected by Snakemake)
