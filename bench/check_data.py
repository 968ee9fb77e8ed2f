"""Speed of `opd check`'s data validation vs a bare `json.loads` loop over the same lines.

Writes a JSONL of N rows (default 1,000,000 digit-sorting rows), then, in one run and alternating
the two (best of `--repeat`), times:
  * baseline: ``for line in open(f): json.loads(line)``
  * check:    the data rules `opd check` runs on a training file (`opd_nb.checks.data.check_data_file`
              with max_prompt_length, i.e. the full per-row scan plus the file-level rules)
and prints ``ratio_vs_json_loads=X`` (target <= 2.0).

    python bench/check_data.py [--rows 1000000] [--repeat 3]
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))


def baseline(path: Path) -> int:
    n = 0
    with open(path, encoding="utf-8") as fh:
        for line in fh:
            json.loads(line)
            n += 1
    return n


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--rows", type=int, default=1_000_000)
    ap.add_argument("--repeat", type=int, default=3)
    args = ap.parse_args()

    import random

    from opd_nb.checks.data import check_data_file
    from opd_nb.engine.task import make_row
    from opd_nb.spec import dataset as dataset_scan

    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "train.jsonl"
        rng = random.Random(0)
        with open(path, "w", encoding="utf-8") as fh:
            for _ in range(args.rows):
                digits = "".join(rng.choice("0123456789") for _ in range(rng.randint(3, 8)))
                fh.write(json.dumps(make_row(digits)) + "\n")
        size = os.path.getsize(path)
        t_base, t_check = [], []
        report = None
        for _ in range(args.repeat):
            t0 = time.perf_counter()
            n = baseline(path)
            t_base.append(time.perf_counter() - t0)
            t0 = time.perf_counter()
            report = check_data_file(path, max_prompt_length=1024)
            t_check.append(time.perf_counter() - t0)
        assert n == args.rows
        b, c = min(t_base), min(t_check)
        print(
            f"rows={args.rows} size_mib={size / 1024**2:.1f} parser={'orjson' if dataset_scan._orjson else 'json'}"
        )
        print(f"json_loads_s={b:.3f} check_s={c:.3f} findings={len(report.findings) if report else 0}")
        print(f"ratio_vs_json_loads={c / b:.2f}")


if __name__ == "__main__":
    main()
