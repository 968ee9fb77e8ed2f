"""Reject invalid answers before anything is written (cookiecutter pre-generation hook).

The rules are opd-nb's own (`opd_nb.workspace.rules`, the same ones `opd new` applies before it
calls cookiecutter), imported from the installed package so that a plain `cookiecutter template/`
run gives the same clear message and the two can never drift apart.
"""

import json
import sys

CONTEXT = json.loads(r"""{{ cookiecutter | tojson }}""")
PLACEHOLDER_SLUG = "invalid-workspace-name"  # what cookiecutter.json derives from a name without letters


def main() -> int:
    try:
        from opd_nb.workspace.rules import problems
        from slugify import slugify  # python-slugify: cookiecutter's own slugify filter
    except ImportError as exc:
        print(f"error: this template needs opd-nb installed in the same Python ({exc})", file=sys.stderr)
        return 1
    given = str(CONTEXT.get("workspace_slug", ""))

    def slug_of(name: str) -> str:
        return given if given and given != PLACEHOLDER_SLUG else slugify(name)

    found = problems(CONTEXT, slugify=slug_of)
    for problem in found:
        print(f"error: {problem.message} ({problem.fix})", file=sys.stderr)
    return 1 if found else 0


if __name__ == "__main__":
    sys.exit(main())
