from adsl.workflow import paper_waterfall, run

run(snakemake, paper_waterfall)  # noqa: F821 (injected by Snakemake)
