rule roofline_points:
    input:
        catalogue_inputs(),
    output:
        csv="results/costmodel/roofline_points.csv",
    resources:
        mem_mb=2000,
        runtime=10,
        cpus_per_task=1,
    params:
        name="roofline_points",
        basedir=BASEDIR,
        settings=config["roofline"],
    script:
        "../scripts/table.py"


rule validation_table:
    input:
        catalogue_inputs(),
        anchor_inputs(),
        measured=expand(
            "results/acceptance/measured/{category}.json",
            category=config["acceptance"]["categories"],
        ),
    output:
        csv="results/costmodel/validation.csv",
    resources:
        mem_mb=2000,
        runtime=10,
        cpus_per_task=1,
    params:
        name="validation",
        basedir=BASEDIR,
    script:
        "../scripts/table.py"


def acceptance_table_inputs(wc):
    """The profile; Fig. 4a's table also draws the models calibrated to the paper's Fig. 4a."""
    inputs = {"profile": PROFILE_INPUT}
    if wc.table == "acceptance_vs_length":
        calibrated = [
            p
            for p, how in ACC["pairs"].items()
            if how.get("calibrate") == "paper_fig04a"
        ]
        inputs["calibrated"] = expand(
            "results/acceptance/{pair}/{category}.json",
            pair=calibrated,
            category=ACC["categories"],
        )
    return inputs


rule acceptance_tables:
    input:
        anchor_inputs(),
        unpack(acceptance_table_inputs),
    output:
        csv="results/acceptance/{table}.csv",
    wildcard_constraints:
        table="acceptance_vs_length|accepted_per_iteration",
    resources:
        mem_mb=2000,
        runtime=10,
        cpus_per_task=1,
    params:
        name=lambda wc: wc.table,
        basedir=BASEDIR,
    script:
        "../scripts/table.py"


rule verification_breakdown:
    input:
        catalogue_inputs(),
    output:
        csv="results/costmodel/fig17.csv",
    resources:
        mem_mb=2000,
        runtime=10,
        cpus_per_task=1,
    params:
        name="fig17",
        basedir=BASEDIR,
        settings=[SIM["experiments"]["seqlen"], SIM["draft_length"], SIM["systems"]],
    script:
        "../scripts/table.py"


rule area_table:
    input:
        components=str(resolve_input("data/area_components.csv")),
    output:
        csv="results/costmodel/area.csv",
    resources:
        mem_mb=1000,
        runtime=5,
        cpus_per_task=1,
    params:
        name="area",
        basedir=BASEDIR,
    script:
        "../scripts/table.py"
