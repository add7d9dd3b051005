"""Command line: `adsl check|table|figure|calibrate|profile-snapshot|cost` for users who skip Snakemake.

Every argument is checked before any work starts; a bad one stops the command with a message that names
it and what is allowed, and exit status 2 (no traceback)."""

from __future__ import annotations

import argparse
import re
import sys
from pathlib import Path

from adsl.errors import AdslError, ConfigError, shorten

# Runtimes with public measurements to refit them to: anchor file under anchors_dir, and its fit.
CALIBRATED = {"gpt-fast": "gpu_decode.csv", "eager": "eager_decode.csv"}
SNAKEMAKE = "snakemake {} --cores 2"


# -- argument types: argparse turns ArgumentTypeError into "argument --x: <message>" and exit status 2
# the configuration schema's bounds: batches up to 1024 (beyond any serving engine's max_num_seqs) and
# sequences up to 131,072 tokens (the longest context of the catalogue's models)
MAX_BATCH, MAX_TOKENS = 1024, 131_072


def positive_int(text: str, most: int = MAX_TOKENS) -> int:
    """A count (requests, tokens): an integer in [1, most]."""
    try:
        value = int(text) if len(text) <= 20 else None
    except ValueError:
        value = None
    if value is None:
        raise argparse.ArgumentTypeError(f"{shorten(repr(text), 60)} is not an integer; must be in [1, {most}]")
    if not 1 <= value <= most:
        raise argparse.ArgumentTypeError(f"{value} is out of range; must be an integer in [1, {most}]")
    return value


def batch_size(text: str) -> int:
    """Requests in a batch: an integer in [1, MAX_BATCH]."""
    return positive_int(text, MAX_BATCH)


def output_folder(text: str) -> str:
    """A folder to write into: not empty (an empty path would mean the working directory's root for some
    tools and the filesystem's for others), not an existing file."""
    if not text.strip():
        raise argparse.ArgumentTypeError("an empty path; give a folder (it is made if missing)")
    if Path(text).exists() and not Path(text).is_dir():
        raise argparse.ArgumentTypeError(f"{shorten(text, 200)!r} is a file; give a folder")
    return text


def output_file(text: str) -> str:
    """A file to write: not empty, not an existing folder, in a folder that exists."""
    path = Path(text)
    if not text.strip():
        raise argparse.ArgumentTypeError("an empty path; give a file path")
    if path.is_dir() or text.endswith(("/", "\\")):
        raise argparse.ArgumentTypeError(f"{shorten(text, 200)!r} is a folder; give a file path in it")
    if not path.parent.is_dir():
        raise argparse.ArgumentTypeError(f"no folder {shorten(str(path.parent), 200)!r}; make it first")
    return text


def profile_name(text: str) -> str:
    """A profile folder name, checked as the schema checks ``profiling.name`` (no path separators, no hidden
    or parent folders: the name becomes a folder under data/profiles/ and the checkpoint cache)."""
    from adsl.config import SCHEMA_PATH, read_yaml

    rule = read_yaml(SCHEMA_PATH)["properties"]["profiling"]["properties"]["name"]
    if not re.fullmatch(rule["pattern"], text):
        raise argparse.ArgumentTypeError(f"{text!r} is not a profile name; allowed: {rule['description']}")
    return text


# -- helpers -----------------------------------------------------------------------------------------
def _ws(args):
    from adsl.workspace import load_workspace

    # named here: the loader's "file not found" would not say which option gave the path
    if not Path(args.config).is_file():
        raise AdslError(f"--config: no such file {args.config!r}; give a workflow configuration (YAML)")
    if not args.base.strip() or not Path(args.base).is_dir():
        raise AdslError(f"--base: no such folder {args.base!r}")
    return load_workspace(args.config, base=args.base)


def _known(option: str, kind: str, name: str, known) -> None:
    if name not in known:
        raise AdslError(f"{option}: unknown {kind} {name!r}; known: {', '.join(sorted(known))}")


def _registry(ws, args):
    """The package's tables and figures and those of the configuration's extension modules."""
    from adsl.figures.registry import registry

    extensions = list(ws.settings.extensions)
    if not extensions:
        return registry()  # the package's own: an error here is a bug, with its traceback
    try:
        return registry(extensions)
    except (ImportError, OSError, SyntaxError, KeyError, ValueError) as exc:  # an extension that does not load or fit
        raise ConfigError(args.config, "extensions", f"{type(exc).__name__}: {exc}") from exc


def _builtin(kind: str) -> str:
    """The package's table or figure names, for the help (importing the registry takes a second)."""
    from adsl.figures.registry import registry

    reg = registry()
    names = reg.tables if kind == "table" else reg.figures
    return f"built-in {kind}s (extensions in the configuration add more): {', '.join(sorted(names))}"


def _inputs(spec, ws) -> dict:
    """A table's named input files, each found in the working directory or else under --base."""
    found = spec.inputs(ws.settings, lambda p: str(ws.path(p)))
    return {
        k: [str(ws.path(p)) for p in v] if isinstance(v, list | tuple) else str(ws.path(v)) for k, v in found.items()
    }


def _check_inputs(kind: str, name: str, target: str, inputs: dict, ws) -> None:
    """Stop with what is missing and the Snakemake command that builds it (the workflow makes these files)."""
    from adsl import paths

    files = [p for v in inputs.values() for p in (v if isinstance(v, list) else [v])]
    missing = [p for p in files if not Path(p).exists()]
    if not files or not missing:
        return
    profile = ws.path(paths.profile(ws.settings.profiling.name))
    needs = []
    if any(Path(p).parent == profile for p in missing):
        needs.append(f"the acceptance profile {profile}/ (profiling needs the `profile` extra and hours of CPU time)")
    rest = [p for p in missing if Path(p).parent != profile]
    if rest:
        needs.append(", ".join(rest[:5]) + (f" and {len(rest) - 5} more" if len(rest) > 5 else ""))
    raise AdslError(f"{kind} {name}: needs {' and '.join(needs)}; build it with `{SNAKEMAKE.format(target)}`")


def _compute(spec, ws, kind: str, name: str, target: str):
    inputs = _inputs(spec, ws)
    _check_inputs(kind, name, target, inputs, ws)
    return spec.function(ws, **inputs, **spec.options)


def _short(n: int) -> str:
    """An integer for a message: a huge one as its order of magnitude, not hundreds of digits."""
    return str(n) if n < 10**12 else f"~1e{len(str(n)) - 1}"


# -- commands ----------------------------------------------------------------------------------------
def cmd_check(args) -> int:
    from adsl import paths
    from adsl.profiling import recorded
    from adsl.sim.experiment import check_experiments

    ws = _ws(args)
    _registry(ws, args)  # the extension modules load and fit the registry
    points = check_experiments(ws)  # what the Snakefile checks before any job
    profile = ws.path(paths.profile(ws.settings.profiling.name))
    problem, warnings = recorded.check(profile, ws.settings.profiling, ws.settings.seed, [Path.cwd(), ws.base])
    for message in warnings:
        print(f"adsl: warning: {message}", file=sys.stderr)
    print(f"{args.config}: valid ({len(ws.models.models)} models, {len(ws.hardware.systems)} systems)")
    print(f"  {points} experiment points checked to fit in memory")
    print(f"  acceptance profile: {problem or profile}")
    print(f"  models: {', '.join(sorted(ws.models.models))}")
    print(f"  systems: {', '.join(sorted(ws.hardware.systems))}")
    print(f"  runtimes: {', '.join(sorted(ws.hardware.runtimes))}")
    return 0


def cmd_table(args) -> int:
    from adsl.io import write_csv

    ws = _ws(args)
    reg = _registry(ws, args)
    _known("table NAME", "table", args.name, reg.tables)
    spec = reg.tables[args.name]
    df = _compute(spec, ws, "table", args.name, spec.path)
    if args.output:
        write_csv(df, args.output)
        print(f"wrote {args.output}")
    else:
        print(df.to_string(index=False))
    return 0


def cmd_figure(args) -> int:
    from adsl.figures import render

    ws = _ws(args)
    reg = _registry(ws, args)
    _known("figure NAME", "figure", args.name, reg.figures)
    table = _compute(reg.table_of(args.name), ws, "figure", args.name, f"figures/{args.name}.pdf")
    pdf, png = f"{args.outdir}/{args.name}.pdf", f"{args.outdir}/{args.name}.png"
    render(args.name, ws, table, pdf=pdf, png=png, reg=reg)
    print(f"wrote {pdf} and .png")
    return 0


def cmd_calibrate(args) -> int:
    from adsl.figures.validation import read_anchor
    from adsl.perf.runtime_fit import fit_eager_runtime, fit_runtime

    ws = _ws(args)
    _known("--runtime", "runtime", args.runtime, ws.hardware.runtimes)
    csv = ws.path(ws.settings.anchors_dir) / CALIBRATED[args.runtime]
    if not csv.is_file():
        raise ConfigError(args.config, "anchors_dir", f"{csv} not found; the {args.runtime} runtime is fitted to it")
    anchors = read_anchor(csv)
    try:  # the anchor file is user data: a model it names or too few 'fit' rows is its error, not ours
        if args.runtime == "eager":
            rows = anchors[anchors["use"] == "fit"]
            if len(rows) != 1:
                raise ValueError(f"the eager runtime is fitted to one 'fit' row, got {len(rows)}")
            rt = fit_eager_runtime(next(rows.itertuples()), ws.models, ws.hardware, args.runtime)
        else:
            rt = fit_runtime(anchors, ws.models, ws.hardware, args.runtime)
    except (KeyError, ValueError) as exc:
        raise AdslError(f"{csv}: {exc}") from exc
    print(f"runtime {rt.name}: fixed cost per kernel {rt.fixed_s['fc']:.3g} s,")
    print(f"  all-reduce base {rt.allreduce_base_s:.3g} s, per ring step {rt.allreduce_step_s:.3g} s")
    return 0


def cmd_cost(args) -> int:
    import numpy as np
    import pandas as pd

    from adsl.perf.cost import pass_cost

    ws = _ws(args)
    _known("--model", "model", args.model, ws.models.models)
    _known("--system", "system", args.system, ws.hardware.systems)
    model, system = ws.models.model(args.model), ws.hardware.system(args.system)
    sizes = ", ".join(f"--{k} {_short(getattr(args, k))}" for k in ("batch", "tokens", "context"))
    try:
        with np.errstate(all="ignore"):  # an overflow is reported below, naming the arguments
            cost = pass_cost(model, system, args.batch, args.tokens, args.context)
    except OverflowError:
        raise AdslError(f"{sizes}: too large to cost (float overflow); give smaller sizes") from None
    rows = [(n, float(cost.time_s[n]) * 1e3, float(cost.energy_j[n]), cost.device[n]) for n in cost.time_s]
    df = pd.DataFrame(rows, columns=["operator", "time_ms", "energy_j", "device"])
    total_ms, total_j = float(cost.total_time_s) * 1e3, float(cost.total_energy_j)
    values = [total_ms, total_j, *df["time_ms"], *df["energy_j"]]
    # positive sizes give finite, non-negative costs; anything else is out of the model's range
    if not all(np.isfinite(values)) or min(values) < 0 or total_ms <= 0:
        raise AdslError(
            f"{sizes}: model {args.model} on {args.system} gives no finite positive cost; give smaller sizes"
        )
    print(df.to_string(index=False))
    print(f"total {total_ms:.4g} ms, {total_j:.4g} J per forward pass")
    return 0


def cmd_snapshot(args) -> int:
    from adsl.profiling.run import default_checkpoints, snapshot

    name = args.name or _ws(args).settings.profiling.name  # the schema checks profiling.name's pattern
    out = args.out or f"data/profiles/{name}.partial"
    n = snapshot(default_checkpoints(name), out)  # raises a TraceError when there is nothing to write
    print(f"wrote {n} finished requests of profile {name!r} to {out}")
    return 0


class _Parser(argparse.ArgumentParser):
    """A parser whose epilog is built only when its help is shown (``lazy_epilog``)."""

    lazy_epilog = None

    def format_help(self) -> str:
        if self.lazy_epilog is not None:
            self.epilog = self.lazy_epilog()
        return super().format_help()


def _command(sub, name: str, text: str) -> argparse.ArgumentParser:
    """A subcommand whose one-line help is also the description its own --help shows."""
    return sub.add_parser(name, help=text, description=text)


def parser() -> argparse.ArgumentParser:
    p = _Parser(prog="adsl", description=__doc__)
    p.add_argument("--config", default="config/config.yaml", help="workflow configuration (YAML) [%(default)s]")
    p.add_argument("--base", default=".", help="folder that relative input paths fall back to [%(default)s]")
    sub = p.add_subparsers(dest="command", required=True, metavar="COMMAND")
    _command(sub, "check", "validate the configuration and catalogues; list models, systems, runtimes").set_defaults(
        func=cmd_check
    )
    t = _command(sub, "table", "compute a registered table")
    t.lazy_epilog = lambda: _builtin("table")
    t.add_argument("name", help="table name (listed below)")
    t.add_argument("-o", "--output", type=output_file, help="CSV path (default: print)")
    t.set_defaults(func=cmd_table)
    f = _command(sub, "figure", "render a registered figure (PDF and PNG)")
    f.lazy_epilog = lambda: _builtin("figure")
    f.add_argument("name", help="figure name (listed below)")
    f.add_argument(
        "--outdir", type=output_folder, default="figures", help="folder for <name>.pdf and <name>.png [%(default)s]"
    )
    f.set_defaults(func=cmd_figure)
    c = _command(sub, "calibrate", "refit a runtime's overheads to its public decode measurements")
    c.add_argument(
        "--runtime",
        default="gpt-fast",
        choices=sorted(CALIBRATED),
        help="runtime of the hardware catalogue: gpt-fast (anchors_dir/gpu_decode.csv) or eager "
        "(anchors_dir/eager_decode.csv) [%(default)s]",
    )
    c.set_defaults(func=cmd_calibrate)
    s = _command(sub, "profile-snapshot", "write the finished requests of an interrupted profiling run")
    s.add_argument(
        "--name",
        type=profile_name,
        help="profile folder name: letters, digits, '.', '_', '-', no '..' (default: profiling.name of the config)",
    )
    s.add_argument("--out", type=output_folder, help="folder (default: data/profiles/<name>.partial)")
    s.set_defaults(func=cmd_snapshot)
    k = _command(sub, "cost", "time (ms) and energy (J) of one forward pass, per operator")
    k.add_argument("--model", required=True, help="model of the models catalogue (`adsl check` lists them)")
    k.add_argument("--system", required=True, help="system of the hardware catalogue (`adsl check` lists them)")
    k.add_argument("--batch", type=batch_size, default=1, help=f"requests in the batch, 1 to {MAX_BATCH} [%(default)s]")
    k.add_argument(
        "--tokens",
        type=positive_int,
        default=1,
        help=f"new tokens per request, 1 to {MAX_TOKENS} (d + 1 to verify d) [%(default)s]",
    )
    k.add_argument(
        "--context", type=positive_int, default=1024, help=f"cached tokens per request, 1 to {MAX_TOKENS} [%(default)s]"
    )
    k.set_defaults(func=cmd_cost)
    return p


def main(argv: list[str] | None = None) -> int:
    args = parser().parse_args(argv)  # a bad argument: usage, message and exit status 2
    try:
        return args.func(args)
    except AdslError as exc:  # bad input a user can fix: its message alone
        print(f"adsl: error: {shorten(exc, 1000)}", file=sys.stderr)
        return 2
    except OSError as exc:  # a folder that cannot be written, a full disk: the file and the reason
        print(f"adsl: error: {shorten(exc.filename or '', 200)}: {exc.strerror or exc}", file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())
