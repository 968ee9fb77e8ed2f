"""Regenerate the template's baked datasets from the engine's synthetic digit-sorting task.

Why a script: the rows in ``template/{{cookiecutter.workspace_slug}}/data/`` must match what the
bundled tiny models were trained on, and must stay reproducible (seeded) when the task changes.

Agentic workspaces get the tool-using variant (each row offers the example tool in ``tools``): the
template keeps it in ``data/agentic/``, which the post-generation hook moves over ``data/``.

    python scripts/make_template_data.py          # rewrite the files
    python scripts/make_template_data.py --check  # exit 1 if the files are stale
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from opd_nb.engine.task import make_rows

ROOT = Path(__file__).resolve().parents[1]
DATA_DIR = ROOT / "template" / "{{cookiecutter.workspace_slug}}" / "data"
N_TRAIN, TRAIN_SEED = 512, 0
N_VALIDATION, VALIDATION_SEED = 64, 1
AGENTIC_DIR = "agentic"  # the tool-using variant, moved over data/ for agentic workspaces


def build() -> dict[str, str]:
    """File name (relative to the data dir) -> JSONL text; validation prompts are disjoint from training
    prompts; the agentic files are the same prompts with the example tool offered."""

    def dump(rows: list[dict]) -> str:
        return "".join(json.dumps(row, ensure_ascii=False) + "\n" for row in rows)

    out = {}
    for prefix, tools in (("", False), (f"{AGENTIC_DIR}/", True)):
        train = make_rows(N_TRAIN, seed=TRAIN_SEED, tools=tools)
        seen = {row["messages"][-1]["content"] for row in train}
        validation = make_rows(N_VALIDATION, seed=VALIDATION_SEED, exclude=seen, tools=tools)
        out.update({f"{prefix}train.jsonl": dump(train), f"{prefix}validation.jsonl": dump(validation)})
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="only check that the files are up to date")
    args = parser.parse_args(argv)
    stale = []
    for name, text in build().items():
        path = DATA_DIR / name
        if args.check:
            if not path.exists() or path.read_text(encoding="utf-8") != text:
                stale.append(str(path))
            continue
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text, encoding="utf-8")
        print(f"wrote {path.relative_to(ROOT)} ({text.count(chr(10))} rows)")
    if stale:
        print("stale: " + ", ".join(stale) + " (run: python scripts/make_template_data.py)", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
