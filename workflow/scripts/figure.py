from adsl.workflow import figure

figure(snakemake)  # noqa: F821 (injected by Snakemake)
