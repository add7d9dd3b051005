import adsl.workflow

getattr(adsl.workflow, snakemake.params.step)(snakemake)  # noqa: F821 (injected by Snakemake)
