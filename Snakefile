# adsl: SADDLE reproduction workflow. `snakemake --cores N` renders every figure.
import os
import sys

from snakemake.utils import min_version

from adsl.config import load_config, read_yaml
from adsl.errors import AdslError, shorten
from adsl.figures.registry import registry
from adsl.sim.experiment import check_experiments
from adsl.workspace import load_workspace

min_version("9.19")


# The default configuration ships with the workflow; `--configfile` layers a user's file on top.
configfile: os.path.join(workflow.basedir, "config", "config.yaml")


# Validates the configuration against config/schema.yaml (filling defaults) and the catalogues
# against config/catalogue.schema.yaml, and builds every experiment point that must fit in memory as
# its job will; a bad value stops here, before any job is scheduled. Each config file is read again
# with adsl's loader, which refuses a key given twice (Snakemake's keeps the last one silently).
# A user's error ends the run with its one line (file, field, what is allowed) and exit status 1.
CONFIG_FILES = " + ".join(map(str, workflow.configfiles)) or "config"
try:
    for configfile_path in workflow.configfiles:
        read_yaml(configfile_path)
    config.update(load_config(config, CONFIG_FILES))
    WS = load_workspace(config, base=workflow.basedir, file=CONFIG_FILES)
    check_experiments(WS)
    REG = registry(config["extensions"])
except AdslError as error:
    sys.exit(f"adsl: error: {shorten(error, 1000)}")


include: "workflow/rules/common.smk"
include: "workflow/rules/profile.smk"
include: "workflow/rules/fit.smk"
include: "workflow/rules/simulate.smk"
include: "workflow/rules/dse.smk"
include: "workflow/rules/tables.smk"
include: "workflow/rules/figures.smk"
include: "workflow/rules/paper.smk"


rule all:
    input:
        default_targets(),
