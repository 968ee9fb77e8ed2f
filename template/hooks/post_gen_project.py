"""Remove what the chosen mode does not use (cookiecutter post-generation hook).

The rule is opd-nb's own (`opd_nb.workspace.mode_files`, which `opd new` applies in its own process),
imported from the installed package so that a plain `cookiecutter template/` run gives the same files.
"""

import json
import sys
from pathlib import Path

MODE = json.loads(r'''{{ cookiecutter.mode | tojson }}''')
WITH_REWARD = json.loads(r'''{{ cookiecutter.with_reward | tojson }}''')


def main() -> int:
    try:
        from opd_nb.workspace.mode_files import prune
    except ImportError as exc:
        print(f"error: this template needs opd-nb installed in the same Python ({exc})", file=sys.stderr)
        return 1
    prune(Path.cwd(), MODE, WITH_REWARD)
    return 0


if __name__ == "__main__":
    sys.exit(main())
