# Stage 2: acceptance models from the measured profile, the paper pairs' calibrations and tau.
from adsl.settings import PairDerivation

PAIRS = sorted(ACC["pairs"])
MEASURED = [paths.measured_model(c) for c in ACC["categories"]]
ALL_PAIR_MODELS = paths.pair_models(PAIRS, ACC["categories"])


rule fit_measured:
    input:
        profile=profile_inputs,
    output:
        model=paths.measured_model("{category}"),
    log:
        "logs/fit_measured/{category}.log",
    benchmark:
        "logs/benchmarks/fit_measured/{category}.tsv"
    wildcard_constraints:
        category="|".join(ACC["categories"]),
    # the fits lead to every simulation: ahead of the tables and figures that are ready
    priority: 20
    conda:
        "../envs/adsl.yaml"
    resources:
        mem_mb=4000,
        runtime=30,
        cpus_per_task=1,
    params:
        pair=config["profiling"]["name"],
        bootstrap=ACC["bootstrap"],
        seed=config["seed"],
    script:
        "../scripts/fit_measured.py"


rule acceptance_summary:
    input:
        profile=profile_inputs,
        models=MEASURED,
    output:
        selection="results/acceptance/model_selection.csv",
        heldout="results/acceptance/heldout_check.csv",
    log:
        "logs/acceptance_summary.log",
    benchmark:
        "logs/benchmarks/acceptance_summary.tsv"
    # a minute long and read by figures only: early, beside the calibrations, not last
    priority: 15
    conda:
        "../envs/adsl.yaml"
    resources:
        mem_mb=4000,
        runtime=30,
        cpus_per_task=1,
    params:
        seed=config["seed"],
        heldout_streams=ACC["heldout_streams"],
        heldout_splits=ACC["heldout_splits"],
    script:
        "../scripts/acceptance_summary.py"


# One job per pair: its categories share the pair-level shape parameter of the calibration.
rule calibrate_pair:
    input:
        measured=MEASURED,
        paper=committed(f"{config['anchors_dir']}/paper_fig04a.csv"),
        reference=reference_models,
        profile=profile_inputs,
    output:
        models=paths.pair_models(["{pair}"], ACC["categories"]),
    log:
        "logs/calibrate_pair/{pair}.log",
    benchmark:
        "logs/benchmarks/calibrate_pair/{pair}.tsv"
    wildcard_constraints:
        pair="|".join(PAIRS),
    # a fitted calibration first: it is the long one, and the pairs that borrow it (same_as) and tau wait for it
    priority: lambda wc: 21 if PairDerivation(**ACC["pairs"][wc.pair]).fitted else 20
    conda:
        "../envs/adsl.yaml"
    resources:
        mem_mb=4000,
        runtime=30,
        cpus_per_task=1,
    params:
        derivation=lambda wc: ACC["pairs"][wc.pair],
        calibration=ACC["calibration"],
        seed=config["seed"],
    script:
        "../scripts/calibrate_pair.py"


rule tau:
    input:
        models=ALL_PAIR_MODELS,
    output:
        taus=paths.TAU,
        curves="results/acceptance/tau_success_curves.csv",
    log:
        "logs/tau.log",
    benchmark:
        "logs/benchmarks/tau.tsv"
    priority: 20
    conda:
        "../envs/adsl.yaml"
    resources:
        mem_mb=4000,
        runtime=20,
        cpus_per_task=1,
    params:
        tau=ACC["tau"],
        seed=config["seed"],
    script:
        "../scripts/tau.py"


rule calibration_check:
    input:
        profile=profile_inputs,
        models=ALL_PAIR_MODELS,
        tau=paths.TAU,
    output:
        summary="results/acceptance/calibration_check.csv",
        curves="results/acceptance/calibration_curves.csv",
    log:
        "logs/calibration_check.log",
    benchmark:
        "logs/benchmarks/calibration_check.tsv"
    conda:
        "../envs/adsl.yaml"
    resources:
        mem_mb=4000,
        runtime=20,
        cpus_per_task=1,
    params:
        streams=ACC["tau"]["streams"],
        positions=ACC["tau"]["positions"],
        seed=config["seed"],
    script:
        "../scripts/calibration_check.py"
