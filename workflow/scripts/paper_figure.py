from adsl.workflow import paper_figure, run

run(snakemake, paper_figure)  # noqa: F821 (injected by Snakemake)
