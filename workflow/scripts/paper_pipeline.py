from adsl.workflow import paper_pipeline, run

run(snakemake, paper_pipeline)  # noqa: F821 (injected by Snakemake)
