"""Time `%load_ext opd_nb` in a fresh interpreter and list the heavy modules it imported.

Target: < 300 ms, and none of dashscope / torch / transformers (nor ipywidgets, matplotlib,
typer) imported until a subcommand needs them. Each run is a fresh subprocess (cold module
cache for opd_nb; the OS file cache is warm after the first run). Prints the median of N runs.

    python bench/load_ext.py [--runs 5]
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys

HEAVY = (
    "dashscope",
    "torch",
    "transformers",
    "ipywidgets",
    "matplotlib",
    "anywidget",
    "typer",
    "httpx",
    "fastapi",
    "pandas",
)

PROBE = r"""
import json, sys, time
from IPython.core.interactiveshell import InteractiveShell
ip = InteractiveShell.instance()
before = set(sys.modules)
t0 = time.perf_counter()
ip.run_line_magic("load_ext", "opd_nb")
dt = time.perf_counter() - t0
new = sorted(set(sys.modules) - before)
import contextlib, io
t1 = time.perf_counter()
with contextlib.redirect_stdout(io.StringIO()):
    ip.run_line_magic("opd", "version")
first = time.perf_counter() - t1
after_first = sorted({m.split(".")[0] for m in set(sys.modules) - before if m.split(".")[0] in HEAVY})
heavy = sorted({m.split(".")[0] for m in new if m.split(".")[0] in HEAVY})
print(json.dumps({"ms": dt * 1000, "heavy": heavy, "new_modules": len(new), "first_ms": first * 1000,
                  "heavy_after_first": after_first,
                  "registered": "opd" in ip.magics_manager.magics["line"]}))
"""


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs", type=int, default=5)
    args = ap.parse_args()
    code = f"HEAVY = {HEAVY!r}\n" + PROBE
    samples = []
    for _ in range(args.runs):
        out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
        samples.append(json.loads(out.stdout.strip().splitlines()[-1]))
    ms = [s["ms"] for s in samples]
    heavy = sorted({m for s in samples for m in s["heavy"]})
    median = statistics.median(ms)
    print(
        f"%load_ext opd_nb: median {median:.1f} ms over {len(ms)} fresh interpreters "
        f"(min {min(ms):.1f}, max {max(ms):.1f}); target < 300 ms -> {'OK' if median < 300 else 'SLOW'}"
    )
    print(f"new modules imported: {samples[-1]['new_modules']}; %opd registered: {samples[-1]['registered']}")
    print(f"heavy modules imported: {', '.join(heavy) if heavy else 'none'} (checked: {', '.join(HEAVY)})")
    first = statistics.median(s["first_ms"] for s in samples)
    print(
        f"first `%opd version` (builds the CLI parser): median {first:.1f} ms; "
        f"heavy modules then: {', '.join(samples[-1]['heavy_after_first']) or 'none'}"
    )


if __name__ == "__main__":
    main()
