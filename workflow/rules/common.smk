from adsl.figures import FIGURES

FIGURE_NAMES = sorted(FIGURES)
BASEDIR = workflow.basedir


def catalogue_inputs():
    from adsl.config import resolve

    return [
        str(resolve(config["catalogues"]["models"], BASEDIR)),
        str(resolve(config["catalogues"]["hardware"], BASEDIR)),
    ]


def anchor_inputs():
    from adsl.config import resolve

    folder = resolve(config["anchors_dir"], BASEDIR)
    return sorted(str(p) for p in folder.glob("*.csv"))


def figure_outputs(names):
    out = []
    for name in names:
        out += [
            f"figures/{name}.pdf",
            f"figures/{name}.png",
            f"results/figures/{name}.csv",
        ]
    return out
