# One rule draws every registered figure (adsl.figures.FIGURES) from its table.
rule figure:
    input:
        table=lambda wc: TABLE_PATHS[FIGURES[wc.name][0]],
    output:
        pdf=report(
            "figures/{name}.pdf",
            caption="../report/figure.rst",
            category="{name}",
        ),
        png="figures/{name}.png",
        csv="results/figures/{name}.csv",
    wildcard_constraints:
        name="|".join(FIGURE_NAMES),
    resources:
        mem_mb=2000,
        runtime=10,
        cpus_per_task=1,
    params:
        name=lambda wc: wc.name,
        basedir=BASEDIR,
        caption=lambda wc: caption(wc.name),
    script:
        "../scripts/figure.py"
