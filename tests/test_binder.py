"""Binder: `binder/postBuild` and `binder/start` run as written, in a fresh venv with HOME in tmp.

The fresh venv sees the project venv's packages through a `.pth` file, so `pip install` inside
`postBuild` resolves from what is already installed (no network, well under a minute) while still
running the script's real commands: the pinned torch install, the editable install of the project
with its extras (which creates the venv's own `opd`), and the demo workspaces. `start` must leave a
working local control plane behind and hand over to the session command with the SDK pointed at it.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import sysconfig
from pathlib import Path

import httpx
import pytest

REPO = Path(__file__).resolve().parent.parent
BINDER = REPO / "binder"

pytestmark = pytest.mark.slow


def _fresh_venv(root: Path) -> Path:
    """A new venv whose interpreter also sees this venv's site-packages (read-only, via .pth)."""
    venv = root / "venv"
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True, timeout=120)
    py = venv / "bin" / "python"
    purelib = subprocess.run(
        [str(py), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
        check=True,
        capture_output=True,
        text=True,
    ).stdout.strip()
    (Path(purelib) / "opd_nb_parent_venv.pth").write_text(sysconfig.get_paths()["purelib"] + "\n")
    return venv


def _env(venv: Path, home: Path, **extra: str) -> dict[str, str]:
    keep = {k: v for k, v in os.environ.items() if k in ("LANG", "LC_ALL", "TMPDIR") or k.startswith("PIP_")}
    keep.update(
        PATH=f"{venv / 'bin'}:/usr/local/bin:/usr/bin:/bin",
        HOME=str(home),
        VIRTUAL_ENV=str(venv),
        NO_PROXY="127.0.0.1,localhost",
        **extra,
    )
    return keep


def _stop_recorded_server(home: Path) -> None:
    """Last resort if `opd serve stop` failed: end the servers recorded in this HOME's state records."""
    for state in (home / ".cache" / "opd-nb" / "serve-state").glob("*.json"):
        try:
            pid = int(json.loads(state.read_text())["pid"])
        except (OSError, ValueError, KeyError, TypeError):
            continue
        try:
            os.kill(pid, signal.SIGTERM)
        except OSError:
            pass


def test_postbuild_and_start_leave_a_working_control_plane(tmp_path: Path) -> None:
    home = tmp_path / "home"
    home.mkdir()
    venv = _fresh_venv(tmp_path)
    env = _env(venv, home)

    build = subprocess.run(
        ["bash", str(BINDER / "postBuild")], cwd=REPO, env=env, capture_output=True, text=True, timeout=300
    )
    assert build.returncode == 0, build.stdout[-3000:] + build.stderr[-3000:]
    opd = venv / "bin" / "opd"
    assert opd.is_file(), "postBuild must install the `opd` command into the environment"
    for mode in ("pure-distill", "reward", "agentic"):
        ws = home / "opd-workspaces" / f"{mode}-demo"
        assert (ws / "config.yaml").is_file() and (ws / "submit_job.py").is_file(), f"no demo workspace {ws}"
    assert (home / "opd-workspaces" / "reward-demo" / "functions" / "reward" / "reward.py").is_file()
    # the install enables our save hook for the environment's Jupyter server (our views saved as their
    # snapshots; tests/test_browser_saved_live.py)
    server_conf = venv / "etc" / "jupyter" / "jupyter_server_config.d" / "opd_nb.json"
    shipped = REPO / "jupyter-config" / "jupyter_server_config.d" / "opd_nb.json"
    assert server_conf.is_file() and json.loads(server_conf.read_text()) == json.loads(shipped.read_text())
    # JupyterLab and Notebook 7 read it from the environment's labconfig: widget state is saved with
    # the notebook (for widgets other than ours; a server without our hook reopens ours from it)
    labconfig = venv / "etc" / "jupyter" / "labconfig" / "default_setting_overrides.json"
    assert json.loads(labconfig.read_text()) == {
        "@jupyter-widgets/jupyterlab-manager:plugin": {"saveState": True}
    }

    # `start` runs before every session and must end with exec "$@": the command we pass reports
    # the environment it was handed, proving both the exec and the exported variables.
    probe = "import json, os; print(json.dumps({k: os.environ.get(k) for k in ('DASHSCOPE_HTTP_BASE_URL', 'DASHSCOPE_API_KEY')}))"
    try:
        started = subprocess.run(
            ["bash", str(BINDER / "start"), str(venv / "bin" / "python"), "-c", probe],
            cwd=REPO,
            env=_env(venv, home, OPD_SERVE_PORT="0"),
            capture_output=True,
            text=True,
            timeout=120,
        )
        assert started.returncode == 0, started.stderr[-3000:]
        seen = json.loads(started.stdout.strip().splitlines()[-1])
        api = seen["DASHSCOPE_HTTP_BASE_URL"]
        assert api and api.startswith("http://127.0.0.1:") and api.endswith("/api/v1"), started.stdout
        assert seen["DASHSCOPE_API_KEY"] == "local"

        # The control plane outlives `start` and answers the SDK's API and the local-only model list.
        base = api[: -len("/api/v1")]
        assert httpx.get(base + "/health", timeout=10).status_code == 200
        models = httpx.get(api + "/models", headers={"Authorization": "Bearer local"}, timeout=10)
        assert models.status_code == 200, models.text
        assert models.json()["output"]["models"], models.text
        jobs = httpx.get(api + "/fine-tunes", headers={"Authorization": "Bearer local"}, timeout=10)
        assert jobs.status_code == 200, jobs.text

        status = subprocess.run(
            [str(opd), "serve", "status", "--json"], env=env, capture_output=True, text=True, timeout=60
        )
        assert status.returncode == 0 and json.loads(status.stdout)["api_base"] == api, (
            status.stdout + status.stderr
        )
    finally:
        stop = subprocess.run(
            [str(opd), "serve", "stop"], env=env, capture_output=True, text=True, timeout=60
        )
        if stop.returncode != 0:
            _stop_recorded_server(home)
    assert stop.returncode == 0, stop.stderr
    with pytest.raises(httpx.HTTPError):
        httpx.get(base + "/health", timeout=3)
