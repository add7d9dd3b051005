ACC = config["acceptance"]
PAIRS = sorted(ACC["pairs"])


rule fit_measured:
    input:
        profile=PROFILE_INPUT,
    output:
        "results/acceptance/measured/{category}.json",
    wildcard_constraints:
        category="|".join(ACC["categories"]),
    resources:
        mem_mb=4000,
        runtime=30,
        cpus_per_task=1,
    params:
        step="fit_measured",
        settings=ACC["bootstrap"],
    script:
        "../scripts/fitting.py"


rule acceptance_summary:
    input:
        profile=PROFILE_INPUT,
        models=expand(
            "results/acceptance/measured/{category}.json", category=ACC["categories"]
        ),
    output:
        selection="results/acceptance/model_selection.csv",
        heldout="results/acceptance/heldout_check.csv",
    resources:
        mem_mb=4000,
        runtime=30,
        cpus_per_task=1,
    params:
        step="acceptance_summary",
    script:
        "../scripts/fitting.py"


def reference_models(wc):
    how = ACC["pairs"][wc.pair]
    if "same_as" in how:
        return expand(
            "results/acceptance/{ref}/{category}.json",
            ref=how["same_as"],
            category=ACC["categories"],
        )
    return []


# One job per pair: its categories share the pair-level shape parameter of the calibration.
rule calibrate_pair:
    input:
        measured=expand(
            "results/acceptance/measured/{category}.json", category=ACC["categories"]
        ),
        paper=str(resolve_input(config["anchors_dir"]) / "paper_fig04a.csv"),
        reference=reference_models,
        profile=PROFILE_INPUT,
    output:
        expand(
            "results/acceptance/{{pair}}/{category}.json", category=ACC["categories"]
        ),
    wildcard_constraints:
        pair="|".join(PAIRS),
    resources:
        mem_mb=4000,
        runtime=30,
        cpus_per_task=1,
    params:
        step="calibrate_pair",
        settings=lambda wc: [ACC["pairs"][wc.pair], ACC["calibration"]],
    script:
        "../scripts/fitting.py"


rule tau:
    input:
        models=expand(
            "results/acceptance/{pair}/{category}.json",
            pair=PAIRS,
            category=ACC["categories"],
        ),
    output:
        tau="results/acceptance/tau.csv",
        curves="results/acceptance/tau_success_curves.csv",
    resources:
        mem_mb=4000,
        runtime=20,
        cpus_per_task=1,
    params:
        step="tau_table",
        settings=ACC["tau"],
    script:
        "../scripts/fitting.py"


rule calibration_check:
    input:
        profile=PROFILE_INPUT,
        models=expand(
            "results/acceptance/{pair}/{category}.json",
            pair=PAIRS,
            category=ACC["categories"],
        ),
        tau="results/acceptance/tau.csv",
    output:
        summary="results/acceptance/calibration_check.csv",
        curves="results/acceptance/calibration_curves.csv",
    resources:
        mem_mb=4000,
        runtime=20,
        cpus_per_task=1,
    params:
        step="calibration_check",
        settings=ACC["tau"],
    script:
        "../scripts/fitting.py"


rule fit_diagnostics_table:
    input:
        profile=PROFILE_INPUT,
        models=expand(
            "results/acceptance/measured/{category}.json", category=ACC["categories"]
        ),
    output:
        csv="results/acceptance/fit_diagnostics.csv",
    resources:
        mem_mb=2000,
        runtime=10,
        cpus_per_task=1,
    params:
        name="fit_diagnostics",
        basedir=BASEDIR,
    script:
        "../scripts/table.py"


rule accepted_per_iteration_model:
    input:
        models=expand(
            "results/acceptance/{pair}/{category}.json",
            pair=ACC["fig04c"]["pair"],
            category=ACC["categories"],
        ),
    output:
        csv="results/acceptance/accepted_per_iteration_model.csv",
    resources:
        mem_mb=4000,
        runtime=10,
        cpus_per_task=1,
    params:
        name="accepted_per_iteration_model",
        basedir=BASEDIR,
        settings=ACC["fig04c"],
    script:
        "../scripts/table.py"
