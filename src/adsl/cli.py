"""Command line: `adsl check|table|figure|calibrate|cost` for users who skip Snakemake."""

from __future__ import annotations

import argparse
import sys

import pandas as pd

from adsl.errors import AdslError


def _ws(args):
    from adsl.workspace import load_workspace

    return load_workspace(args.config, base=args.base)


def cmd_check(args) -> int:
    ws = _ws(args)
    print(f"{args.config}: valid ({len(ws.models.models)} models, {len(ws.hardware.systems)} systems)")
    return 0


def cmd_table(args) -> int:
    from adsl.figures import compute_table
    from adsl.io import write_csv

    df = compute_table(args.name, _ws(args))
    if args.output:
        write_csv(df, args.output)
    else:
        print(df.to_string(index=False))
    return 0


def cmd_figure(args) -> int:
    from adsl.figures import render

    render(args.name, _ws(args), pdf=f"{args.outdir}/{args.name}.pdf", png=f"{args.outdir}/{args.name}.png")
    print(f"wrote {args.outdir}/{args.name}.pdf and .png")
    return 0


def cmd_calibrate(args) -> int:
    from adsl.config import resolve
    from adsl.perf.runtime_fit import fit_runtime

    ws = _ws(args)
    anchors = pd.read_csv(resolve(ws.settings.anchors_dir, args.base) / "gpu_decode.csv")
    rt = fit_runtime(anchors, ws.models, ws.hardware, args.runtime)
    print(f"runtime {rt.name}: fixed cost per kernel {rt.fixed_s['fc']:.3g} s,")
    print(f"  all-reduce base {rt.allreduce_base_s:.3g} s, per ring step {rt.allreduce_step_s:.3g} s")
    return 0


def cmd_cost(args) -> int:
    from adsl.perf.cost import pass_cost

    ws = _ws(args)
    model, system = ws.models.model(args.model), ws.hardware.system(args.system)
    cost = pass_cost(model, system, args.batch, args.tokens, args.context)
    rows = [(n, float(cost.time_s[n]) * 1e3, float(cost.energy_j[n]), cost.device[n]) for n in cost.time_s]
    df = pd.DataFrame(rows, columns=["operator", "time_ms", "energy_j", "device"])
    print(df.to_string(index=False))
    print(f"total {float(cost.total_time_s) * 1e3:.4g} ms, {float(cost.total_energy_j):.4g} J per forward pass")
    return 0


def cmd_snapshot(args) -> int:
    from adsl.profiling.run import default_checkpoints, snapshot

    name = args.name or _ws(args).settings.profiling.name
    out = args.out or f"data/profiles/{name}.partial"
    n = snapshot(default_checkpoints(name), out)
    print(f"wrote {n} finished requests of profile {name!r} to {out}")
    return 0


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="adsl", description=__doc__)
    p.add_argument("--config", default="config/config.yaml", help="workflow configuration (YAML)")
    p.add_argument("--base", default=".", help="folder that relative input paths fall back to")
    sub = p.add_subparsers(dest="command", required=True)
    sub.add_parser("check", help="validate the configuration and catalogues").set_defaults(func=cmd_check)
    t = sub.add_parser("table", help="compute a registered table")
    t.add_argument("name")
    t.add_argument("-o", "--output", help="CSV path (default: print)")
    t.set_defaults(func=cmd_table)
    f = sub.add_parser("figure", help="render a registered figure")
    f.add_argument("name")
    f.add_argument("--outdir", default="figures")
    f.set_defaults(func=cmd_figure)
    c = sub.add_parser("calibrate", help="refit a runtime's overheads to the gpt-fast anchors")
    c.add_argument("--runtime", default="gpt-fast")
    c.set_defaults(func=cmd_calibrate)
    s = sub.add_parser("profile-snapshot", help="write the finished requests of an interrupted profiling run")
    s.add_argument("--name", help="profile name (default: profiling.name of the config)")
    s.add_argument("--out", help="folder (default: data/profiles/<name>.partial)")
    s.set_defaults(func=cmd_snapshot)
    k = sub.add_parser("cost", help="cost of one forward pass, per operator")
    k.add_argument("--model", required=True)
    k.add_argument("--system", required=True)
    k.add_argument("--batch", type=int, default=1)
    k.add_argument("--tokens", type=int, default=1, help="new tokens per request (d + 1 to verify d)")
    k.add_argument("--context", type=int, default=1024)
    k.set_defaults(func=cmd_cost)
    return p


def main(argv: list[str] | None = None) -> int:
    args = parser().parse_args(argv)
    try:
        return args.func(args)
    except (AdslError, KeyError, ValueError, FileNotFoundError) as exc:
        print(f"adsl: error: {exc}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
