import os
import sys
from pathlib import Path

from adsl import paths
from adsl.config import resolve
from adsl.errors import AdslError
from adsl.profiling import recorded
from adsl.profiling.traces import profile_files
from adsl.sim.systems import adaptive

BASEDIR = workflow.basedir
SETTINGS = WS.settings
# Tables and figures: the package's and those of the configured extension modules (REG, loaded by the
# Snakefile with the configuration's checks, so a module that fails to load ends the run in one line).
ACC = config["acceptance"]
SIM = config["simulation"]


def committed(path):
    """A committed input (the profile, data/...): the working directory's copy when there is one (or when
    the working directory is the workflow's own folder), else the workflow's."""
    if os.path.samefile(os.getcwd(), BASEDIR):
        return str(path)
    return str(resolve(path, BASEDIR))


PROFILE = paths.profile(SETTINGS.profiling.name)
# The committed profile: in the working directory when it is there, else the workflow's own copy.
PROFILE_INPUT = committed(PROFILE)
# A missing profile, or one made under other settings with `on_mismatch: error`, stops every job that
# reads it when Snakemake builds the DAG (before any job runs); other differences are warned about here.
PROFILE_PROBLEM, PROFILE_WARNINGS = recorded.check(
    PROFILE_INPUT,
    SETTINGS.profiling,
    config["seed"],
    [Path(os.getcwd()), Path(BASEDIR)],
)
for message in PROFILE_WARNINGS:
    print(f"adsl: warning: {message}", file=sys.stderr)


def profile_checked(path):
    """``committed(path)``, stopping with what to do when ``path`` is the profile and cannot be read."""
    if path == PROFILE and PROFILE_PROBLEM:
        raise AdslError(PROFILE_PROBLEM)
    return committed(path)


def profile_inputs(wc=None):
    """The profile's files, one per table, as the input of every rule that reads the profile; such rules
    depend on each (an edit of one in place reruns what reads it; a folder's time does not move).
    """
    return profile_files(profile_checked(PROFILE))


def profiling_prompts(wc):
    """The prompt file profiling reads, as its rule's input, so a missing one stops the run before any
    job (``adsl.profiling.datasets.prompt_file``: Spec-Bench's is fetched at a pinned commit if missing).
    """
    from adsl.profiling.datasets import prompt_file

    return {"prompts": str(prompt_file(SETTINGS.profiling, BASEDIR))}


def sections(names):
    """The configuration sections a registry function reads: its rule's params, nothing else (the
    catalogues it reads are its input files instead, ``catalogue_inputs``)."""
    return {
        k: dse_section() if k == "dse" else config[k]
        for k in names
        if k != "catalogues"
    }


def dse_section():
    """The `dse` block with only the sweep it runs (editing another sweep reruns nothing)."""
    name = config["dse"]["sweep"]
    return {"sweep": name, "sweeps": {name: config["dse"]["sweeps"][name]}}


def catalogue_files():
    return [
        str(resolve(config["catalogues"]["models"], BASEDIR)),
        str(resolve(config["catalogues"]["hardware"], BASEDIR)),
    ]


def catalogue_inputs(reads):
    """The model and hardware catalogue files, as the named input ``catalogues``, for a registry function
    that reads them."""
    return {"catalogues": catalogue_files()} if "catalogues" in reads else {}


# files of a named target that are not registry tables or figures
EXTRA_TARGETS = {"dse": ["results/dse/draft_len_schedule.json"]}


def target_files(target):
    """The figures (with their tables) and tables of a named target of the registry."""
    out = [
        f for name in REG.figure_names(target=target) for f in paths.figure_files(name)
    ]
    out += [REG.tables[n].path for n in REG.table_names(target=target)]
    return out + EXTRA_TARGETS.get(target, [])


def default_targets():
    """Every figure with its table, every registry table, and the acceptance stage's checks (the
    registry's other named targets, too slow for the default run, are rules of their own).
    """
    return target_files("all") + [
        "results/acceptance/model_selection.csv",
        "results/acceptance/heldout_check.csv",
        paths.TAU,
        "results/acceptance/calibration_check.csv",
    ]


def reference_models(wc):
    how = ACC["pairs"][wc.pair]
    return (
        paths.pair_models([how["same_as"]], ACC["categories"])
        if "same_as" in how
        else []
    )


def experiment_inputs(systems, pairs, policies=()):
    """Acceptance models of the pairs, and tau when a system or policy drafts with SADDLE's rule."""
    out = {"models": paths.pair_models(pairs, SIM["categories"])}
    if adaptive(systems) or "running_product" in policies:
        out["tau"] = paths.TAU
    return out


def simulation_params(**keep):
    """The simulation settings an experiment reads: all but the other experiments, the attribution
    steps, the timeline and open-loop figures' and, unless it runs the policy zoo, the zoo's (so editing one
    experiment reruns that experiment alone).
    """
    zoo = any(e.get("policies") for e in keep.get("experiments", {}).values())
    skip = ("experiments", "attribution", "timeline", "open_loop") + (
        () if zoo else ("policies",)
    )
    base = {k: v for k, v in SIM.items() if k not in skip}
    return {**base, **keep}


def experiment_files(wc):
    """The input files of experiment ``wc.experiment``."""
    exp = SETTINGS.simulation.experiments[wc.experiment]
    return experiment_inputs(exp.systems, exp.pairs, exp.policies)


# -- paper mode (workflow/rules/paper.smk) ---------------------------------------------------------
from adsl.paper.reproduction import (
    TABLES as PAPER_TABLES,
    paper_figure_files,
    paper_path,
)

PAPER_FILE = str(resolve(config["paper_mode"], BASEDIR))
PAPER_CONSTANTS = "results/paper/constants.json"
TRAINING_EXPERIMENTS = ["fig03a", "fig03b", "main"]
PAIR_66B = ["OPT-66B"]


def paper_training(wc=None):
    """The training file the paper mode names (read when a paper rule runs, so a default run never needs it)."""
    from adsl.paper.mode import read_paper_mode

    return str(read_paper_mode(PAPER_FILE, BASEDIR).training)


def paper_table_inputs(spec):
    """A registry table's inputs with every simulated result taken from the paper mode's folder."""
    out = {}
    for key, value in spec.inputs(SETTINGS, profile_checked).items():
        out[key] = (
            [paper_path(v) for v in value]
            if isinstance(value, list)
            else paper_path(value)
        )
    return out


PAPER_FIGURES = sorted(n for n in REG.figures if REG.figures[n].table in PAPER_TABLES)
PAPER_EXPERIMENTS = sorted(
    {
        Path(p).stem
        for name in PAPER_TABLES
        for v in REG.tables[name].inputs(SETTINGS, committed).values()
        for p in (v if isinstance(v, list) else [v])
        if str(p).startswith(str(Path(paths.experiment("x")).parent) + "/")
    }
    | set(TRAINING_EXPERIMENTS)
)
