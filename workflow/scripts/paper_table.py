from adsl.workflow import paper_table, run

run(snakemake, paper_table)  # noqa: F821 (injected by Snakemake)
