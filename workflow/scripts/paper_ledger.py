from adsl.workflow import paper_ledger, run

run(snakemake, paper_ledger)  # noqa: F821 (injected by Snakemake)
