from adsl.workflow import paper_reproduction, run

run(snakemake, paper_reproduction)  # noqa: F821 (injected by Snakemake)
