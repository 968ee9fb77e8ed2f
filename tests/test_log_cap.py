"""A process's own log stays under its cap: at each Python write, and by polling for raw writers."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

CAP = 256 * 2**10

CHATTY = """
import os, sys
from opd_nb.functions.log_cap import keep_own_log_under
keep_own_log_under()
for i in range(200):
    print(f"line {i} " + "x" * 10_000)
    assert os.fstat(1).st_size <= {cap} + 11_000, os.fstat(1).st_size  # never past cap + one write
print("stderr goes through the cap too", file=sys.stderr)
print("the last line")
"""


def _run(code: str, log: Path, **env: str) -> subprocess.CompletedProcess:
    with open(log, "ab") as out:
        return subprocess.run(
            [sys.executable, "-c", code],
            stdout=out,
            stderr=subprocess.STDOUT,
            env={"PATH": "/usr/bin:/bin", "OPD_MAX_LOG_BYTES": str(CAP), **env},
            timeout=60,
        )


def test_python_writes_never_pass_the_cap_by_more_than_one_write(tmp_path: Path) -> None:
    log = tmp_path / "server.log"
    done = _run(CHATTY.replace("{cap}", str(CAP)), log)
    text = log.read_text()
    assert done.returncode == 0, text[-2000:]
    assert log.stat().st_size <= CAP + 11_000
    assert "[opd] log cut (" in text and "$OPD_MAX_LOG_BYTES" in text
    assert text.rstrip().endswith("the last line")  # the newest output is kept, in order
    assert "stderr goes through the cap too" in text
    assert "line 199 " in text and "line 0 " not in text


def test_writes_to_the_raw_descriptor_are_cut_by_the_poll(tmp_path: Path) -> None:
    log = tmp_path / "raw.log"
    code = (
        "import os, time\nfrom opd_nb.functions.log_cap import keep_own_log_under\nkeep_own_log_under()\n"
        f"os.write(1, b'y' * {2 * CAP} + b'\\n')\n"
        "deadline = time.monotonic() + 20\n"
        f"while os.fstat(1).st_size > {CAP} and time.monotonic() < deadline:\n    time.sleep(0.05)\n"
        "print('after the cut', os.fstat(1).st_size)\n"
    )
    done = _run(code, log)
    text = log.read_text()
    assert done.returncode == 0, text[-2000:]
    assert "[opd] log cut (1x)" in text and "after the cut" in text
    assert log.stat().st_size < CAP


def test_a_log_that_is_no_file_is_left_alone(tmp_path: Path) -> None:
    code = "from opd_nb.functions.log_cap import keep_own_log_under\nkeep_own_log_under()\nprint('z' * 400_000)\n"
    done = subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        timeout=60,
        env={"OPD_MAX_LOG_BYTES": "1000"},
    )
    assert done.returncode == 0 and len(done.stdout) == 400_001  # a pipe is not cut
