# Design-space exploration (adsl.dse; `snakemake dse`, not part of the default run): the sweep's
# configurations in chunks, one job and one Parquet part each, so a cluster profile farms them out and a
# killed sweep reruns only the missing parts; the parts merged into one table that the registry's dse
# tables and figures read (results/dse/).
from adsl.dse.design import chunks
from adsl.figures.registry import DSE_DRAFT_TABLE, DSE_POINTS

DSE_CHUNKS = chunks(SETTINGS.dse)


rule dse_chunk:
    input:
        ancient(COMPILED),
        # the acceptance models and tau of every pair the sweep simulates
        unpack(lambda wc: REG.tables["dse_capacity"].inputs(SETTINGS, committed)),
        catalogues=catalogue_files(),
    output:
        part="results/dse/parts/{chunk}.parquet",
    log:
        "logs/dse/chunk{chunk}.log",
    benchmark:
        "logs/benchmarks/dse/chunk{chunk}.tsv"
    wildcard_constraints:
        chunk=r"\d+",
    conda:
        "../envs/adsl.yaml"
    resources:
        mem_mb=4000,
        runtime=60,
        cpus_per_task=1,
    params:
        dse=dse_section(),
        simulation=simulation_params(),
        seed=config["seed"],
    script:
        "../scripts/dse_chunk.py"


# the merge and the schedule snippet are a second's work: on the submitting host, not as cluster jobs
rule dse_points:
    input:
        parts=expand("results/dse/parts/{chunk}.parquet", chunk=range(DSE_CHUNKS)),
    output:
        points=DSE_POINTS,
    log:
        "logs/dse/points.log",
    localrule: True
    conda:
        "../envs/adsl.yaml"
    resources:
        mem_mb=2000,
        runtime=10,
        cpus_per_task=1,
    params:
        systems=list(SETTINGS.dse.systems),
    script:
        "../scripts/dse_points.py"


rule dse_schedule:
    input:
        table=DSE_DRAFT_TABLE,
    output:
        snippet="results/dse/draft_len_schedule.json",
    log:
        "logs/dse/schedule.log",
    localrule: True
    conda:
        "../envs/adsl.yaml"
    resources:
        mem_mb=1000,
        runtime=5,
        cpus_per_task=1,
    script:
        "../scripts/dse_schedule.py"
