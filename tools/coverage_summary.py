"""Line and branch coverage of src/adsl, apart, from the .coverage file the README's test command writes
(`pytest --cov`; its report prints the two combined).

    python tools/coverage_summary.py
"""

from __future__ import annotations

import json
import sys
import tempfile
from pathlib import Path

import coverage


def main() -> int:
    if not Path(".coverage").exists():
        print("no .coverage here: run the README's test command first", file=sys.stderr)
        return 1
    cov = coverage.Coverage()
    cov.load()
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "coverage.json"
        cov.json_report(outfile=str(out))
        totals = json.loads(out.read_text())["totals"]
    lines = 100.0 * totals["covered_lines"] / max(totals["num_statements"], 1)
    branches = 100.0 * totals["covered_branches"] / max(totals["num_branches"], 1)
    print(
        f"coverage of src/adsl: lines {lines:.1f} % ({totals['covered_lines']} / {totals['num_statements']}), "
        f"branches {branches:.1f} % ({totals['covered_branches']} / {totals['num_branches']}), "
        f"combined {totals['percent_covered']:.1f} %"
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
