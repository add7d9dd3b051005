# One rule draws every registry figure from its table (adsl.workflow.figure); the caption is the
# registry entry's (its plotting function's docstring).
rule figure:
    input:
        lambda wc: read_files(REG.figures[wc.name].reads),
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
    resources:
        mem_mb=2000,
        runtime=10,
        cpus_per_task=1,
    params:
        settings=lambda wc: sections(REG.figures[wc.name].reads),
        basedir=BASEDIR,
        extensions=config["extensions"],
        report_caption=lambda wc: REG.figures[wc.name].text,
    script:
        "../scripts/figure.py"
