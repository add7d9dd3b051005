"""Mutation testing of the modules whose bugs change published numbers (mutmut 3; not in CI: too slow).

    pip install -e '.[test,mutation]'
    python tools/mutation.py                       # every module below, some hours on 2 cores
    python tools/mutation.py fitting/tau.py        # one module (paths under src/adsl/)
    python tools/mutation.py sim/core.py --tests tests/sim/test_core.py --test-timeouts
    NUMBA_DISABLE_JIT=1 python tools/mutation.py "sim/loop.py:settle,admit" --test-timeouts   # the loop's
        # functions are numba-compiled: uncompiled, the tool strips their decorators (mutmut skips decorated ones)

With ``:f,g`` and ``--workdir`` of an earlier run, only those functions' mutants that have not run yet run
(resuming a stopped run; mutmut itself reruns every mutant it is named).

``--tests`` narrows the tests mutmut may run (default: TESTS): the simulator's hot functions are reached
by slow figure and serving tests too, and a surviving mutant runs every test that reaches it.

It clones HEAD into a scratch folder (mutmut writes its mutants/ there, never into the working tree),
runs mutmut with the package's fast tests (those that import adsl in-process: a Snakemake subprocess
never sees a mutant), and prints per module the mutants killed and survived, the score, and every
survivor with its diff and, when tools/mutation_survivors.yaml lists it, the reason it is equivalent or
accepted. ``--report FILE`` also writes the report as Markdown.
"""

from __future__ import annotations

import argparse
import fnmatch
import os
import re
import subprocess
import sys
import tempfile
from collections import Counter
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[1]
MODULES = [  # sim/loop.py apart, uncompiled (NUMBA_DISABLE_JIT=1; docs/testing.md)
    "sim/core.py",
    "sim/result.py",
    "sim/tables.py",
    "sim/scheduler.py",
    "fitting/tau.py",
    "fitting/generator.py",
    "perf/cost.py",
    "figures/breakdown.py:paper_average_gain,paper_gain_ci95,paper_comparison_table",  # the paper comparison only
]
TESTS = ["tests/sim", "tests/fitting", "tests/perf", "tests/figures", "tests/test_config.py"]
REASONS = ROOT / "tools" / "mutation_survivors.yaml"


def _config(modules: list[str], selection: list[str], timeout_multiplier: float) -> str:
    only = ", ".join(f'"src/adsl/{m}"' for m in modules)
    tests = ", ".join(f'"{t}"' for t in selection)
    return f"""
[tool.mutmut]
source_paths = ["src/adsl"]
only_mutate = [{only}]
pytest_add_cli_args_test_selection = [{tests}]
pytest_add_cli_args = ["-p", "no:cacheprovider", "-q"]
also_copy = ["config", "data", "src", "workflow", "Snakefile", "profiles"]
timeout_multiplier = {timeout_multiplier}
"""


def _globs(files: dict[str, list[str] | None]) -> list[str]:
    """mutmut's names of the listed functions' mutants (none: every mutant of the modules runs)."""
    if any(functions is None for functions in files.values()):
        return []
    out = []
    for module, functions in files.items():
        dotted = "adsl." + module.removesuffix(".py").replace("/", ".") + "."
        for f in functions:
            cls, _, meth = f.rpartition(".")
            out.append(dotted + (f"x\u01c1{cls}\u01c1{meth}" if cls else f"x_{f}") + "__mutmut_*")
    return out


def _mutmut(work: Path, *args: str, env: dict | None = None) -> str:
    exe = Path(sys.executable).with_name("mutmut")
    res = subprocess.run([str(exe), *args], cwd=work, capture_output=True, text=True, env=env)
    if res.returncode not in (0, 1):
        tail = f"{res.stdout[-2000:]}\n{res.stderr[-2000:]}"
        raise SystemExit(f"mutmut {' '.join(args)} failed ({res.returncode}):\n{tail}")
    return res.stdout


def _status(work: Path) -> dict[str, str]:
    """Each mutant's state in ``work`` as mutmut's results give its first word ("not": not checked yet)."""
    status = {}
    for line in _mutmut(work, "results", "--all", "true").splitlines():
        m = re.match(r"\s*(\S+): (\S+)", line)
        if m:
            status[m.group(1)] = m.group(2)
    return status


def _to_run(work: Path, globs: list[str]) -> list[str] | None:
    """What ``mutmut run`` is given: the globs, or in a rerun in the same --workdir the names they match that
    have not run yet (mutmut reruns every mutant it is named; None: nothing is left to run)."""
    if not globs or not (work / "mutants").exists():
        return globs
    status = _status(work)
    left = [n for n, s in status.items() if s in ("not", "check") and any(fnmatch.fnmatchcase(n, g) for g in globs)]
    done = any(fnmatch.fnmatchcase(n, g) for n in status for g in globs)
    return left or (None if done else globs)


def _diff(work: Path, name: str) -> str:
    """The mutated lines of one mutant, '-old / +new'."""
    text = _mutmut(work, "show", name).splitlines()
    old = [ln[1:].strip() for ln in text if ln.startswith("-") and not ln.startswith("---")]
    new = [ln[1:].strip() for ln in text if ln.startswith("+") and not ln.startswith("+++")]
    return f"-{' '.join(old)} / +{' '.join(new)}"


def _function(name: str, dotted: str) -> str:
    """The mutated function of a mutant's name: 'f' for a function, 'Class.method' for a method."""
    raw = name.removeprefix(dotted).split("__mutmut_")[0]
    if raw.startswith("x\u01c1"):  # mutmut names a method x<sep>Class<sep>method
        return ".".join(raw.split("\u01c1")[1:])
    return raw.removeprefix("x_")


def _in(name: str, dotted: str, functions: list[str] | None) -> bool:
    return functions is None or _function(name, dotted) in functions


def _strip_njit(work: Path, modules: list[str]) -> None:
    """The modules' ``@njit(...)`` decorators removed in the scratch clone: mutmut skips decorated
    functions, and with ``NUMBA_DISABLE_JIT=1`` numba runs the plain functions anyway (the same code)."""
    for module in modules:
        path = work / "src" / "adsl" / module
        text = path.read_text()
        stripped = re.sub(r"^@njit\(.*\)\n", "", text, flags=re.M)
        if stripped != text:
            path.write_text(stripped)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument(
        "modules",
        nargs="*",
        default=MODULES,
        help="paths under src/adsl/, optionally with ':f,g' to run and report only those functions (default: MODULES)",
    )
    ap.add_argument("--jobs", type=int, default=2)
    ap.add_argument("--tests", nargs="+", default=TESTS, help="test paths mutmut may run (default: TESTS)")
    ap.add_argument(
        "--timeout-multiplier",
        type=float,
        default=15.0,
        help="a mutant is stopped after 2 x this x (its tests' clean CPU time + 1 s) of CPU time (mutmut's default 15; "
        "a mutant that loops forever in a 30 s test otherwise runs 15 minutes)",
    )
    ap.add_argument(
        "--test-timeouts",
        action="store_true",
        help="a pytest-timeout per test of 4 x its clean time (tools/mutation_timeouts.py; needs pytest-timeout): "
        "a mutant looping forever fails in seconds",
    )
    ap.add_argument("--workdir", type=Path, help="scratch folder (default: a new temporary one)")
    ap.add_argument("--report", type=Path, help="also write the report here (Markdown)")
    ap.add_argument(
        "--report-only", action="store_true", help="report the mutants already run in --workdir (after editing reasons)"
    )
    args = ap.parse_args(argv)
    work = args.workdir or Path(tempfile.mkdtemp(prefix="adsl-mutation-"))
    files = {m.split(":")[0]: (m.split(":")[1].split(",") if ":" in m else None) for m in args.modules}
    if not args.report_only:
        if not (work / ".git").exists():
            subprocess.run(["git", "clone", "-q", str(ROOT), str(work)], check=True)
        if "[tool.mutmut]" not in (work / "pyproject.toml").read_text():  # a rerun in the same --workdir
            with open(work / "pyproject.toml", "a") as f:
                f.write(_config(list(files), args.tests, args.timeout_multiplier))
        if os.environ.get("NUMBA_DISABLE_JIT") == "1":
            _strip_njit(work, list(files))
        env = None
        if args.test_timeouts:
            path = os.pathsep.join(filter(None, [str(ROOT / "tools"), os.environ.get("PYTHONPATH")]))
            addopts = f"{os.environ.get('PYTEST_ADDOPTS', '')} -p mutation_timeouts".strip()
            env = {**os.environ, "PYTHONPATH": path, "PYTEST_ADDOPTS": addopts}
        names = _to_run(work, _globs(files))
        if names is not None:
            _mutmut(work, "run", "--max-children", str(args.jobs), *names, env=env)
    status = _status(work)
    reasons = yaml.safe_load(REASONS.read_text()) if REASONS.exists() else {}
    # other: no test reaches the mutant, or mutmut could not run it; counted as not killed
    out = [
        "| module | mutants | killed | survived | of which equivalent or accepted (reason given) | other | score "
        "| score without the equivalent |",
        "|---|---|---|---|---|---|---|---|",
    ]
    survivors = []
    for module, functions in files.items():
        dotted = "adsl." + module.removesuffix(".py").replace("/", ".") + "."
        mine = {k: v for k, v in status.items() if k.startswith(dotted) and _in(k, dotted, functions)}
        count = Counter(mine.values())
        killed = count["killed"] + count["timeout"]
        tested = len(mine) - count["skipped"]
        score = 100.0 * killed / tested if tested else float("nan")
        other = tested - killed - count["survived"]
        label = module + (f" ({', '.join(functions)})" if functions else "")
        given = (reasons or {}).get(module) or {}
        explained = 0
        for name in sorted(k for k, v in mine.items() if v == "survived"):
            func = _function(name, dotted)
            diff = _diff(work, name)
            why = (given.get(func) or {}).get(diff, "")
            explained += bool(why)
            survivors.append(f"| {module} | {func} | `{diff}` | {why or 'open'} |")
        real = tested - explained
        clean = 100.0 * killed / real if real else float("nan")
        out.append(
            f"| {label} | {tested} | {killed} | {count['survived']} | {explained} | {other} | {score:.1f} % "
            f"| {clean:.1f} % |"
        )
    report = "\n".join(
        [
            "# Mutation report",
            "",
            *out,
            "",
            "| module | function | mutation | reason it survives |",
            "|---|---|---|---|",
            *survivors,
        ]
    )
    print(report)
    if args.report:
        args.report.write_text(report + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
