from adsl.workflow import compile_simulator, run

run(snakemake, compile_simulator)  # noqa: F821 (injected by Snakemake)
