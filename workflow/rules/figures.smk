# One rule draws every registry figure from its table (adsl.workflow.figure); the caption is the
# registry entry's (its plotting function's docstring).
rule figure:
    input:
        unpack(lambda wc: catalogue_inputs(REG.figures[wc.name].reads)),
        source=lambda wc: REG.table_of(wc.name).path,
    output:
        pdf=report(
            "figures/{name}.pdf",
            caption="../report/figure.rst",
            category="{name}",
        ),
        png="figures/{name}.png",
        csv="results/figures/{name}.csv",
    log:
        "logs/figures/{name}.log",
    wildcard_constraints:
        name="|".join(sorted(REG.figures)),
    group:
        "figures"
    conda:
        "../envs/adsl.yaml"
    resources:
        mem_mb=2000,
        runtime=10,
        cpus_per_task=1,
    params:
        settings=lambda wc: sections(REG.figures[wc.name].reads),
        extensions=config["extensions"],
        report_caption=lambda wc: REG.figures[wc.name].text,
    script:
        "../scripts/figure.py"


# The registry's named targets other than `all` (figures too slow for the default run), for example
# `snakemake policies --cores 2`.
for target in REG.targets:

    rule:
        name:
            target
        input:
            target_files(target),
        localrule: True


# The README's gallery: its figures' PNGs and tables copied to docs/img/ (`snakemake gallery`, not part of
# the default run: docs/img/ is committed; tests/workflow/test_gallery.py checks its tables against a run).
rule gallery:
    input:
        images=[f"figures/{n}.png" for n in REG.gallery],
        tables=[f"results/figures/{n}.csv" for n in REG.gallery],
    output:
        copies=[f"docs/img/{n}.{ext}" for n in REG.gallery for ext in ("png", "csv")],
        machine="docs/img/machine.json",
    log:
        "logs/gallery.log",
    conda:
        "../envs/adsl.yaml"
    resources:
        mem_mb=1000,
        runtime=5,
        cpus_per_task=1,
    script:
        "../scripts/gallery.py"
