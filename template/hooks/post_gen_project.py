"""Remove what the chosen mode does not use (cookiecutter post-generation hook).

One template serves the three modes; deleting afterwards is the approach cookiecutter's maintainers
recommend over conditional file names.
"""

import json
import shutil
from pathlib import Path

MODE = json.loads(r'''{{ cookiecutter.mode | tojson }}''')
WITH_REWARD = json.loads(r'''{{ cookiecutter.with_reward | tojson }}''')

HAS_REWARD = MODE == "reward" or (MODE == "agentic" and WITH_REWARD in (True, "true", "yes", "y", "1", 1))
HAS_ROLLOUT = MODE == "agentic"

REMOVE = []
if not HAS_REWARD:
    REMOVE += ["functions/reward", "tests/test_reward.py", "test_reward.py"]
if not HAS_ROLLOUT:
    REMOVE += ["functions/rollout", "tests/test_rollout.py"]
if not (HAS_REWARD or HAS_ROLLOUT):
    REMOVE += ["functions"]

for rel in REMOVE:
    path = Path(rel)
    if path.is_dir():
        shutil.rmtree(path)
    elif path.exists():
        path.unlink()

# Agentic workspaces get the tool-using rows (each offers the example tool); the others the plain ones.
AGENTIC_DATA = Path("data") / "agentic"
if AGENTIC_DATA.is_dir():
    if HAS_ROLLOUT:
        for src in AGENTIC_DATA.glob("*.jsonl"):
            src.replace(Path("data") / src.name)
    shutil.rmtree(AGENTIC_DATA)
