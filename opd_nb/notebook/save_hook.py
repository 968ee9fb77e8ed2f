"""The Jupyter server extension that saves our views as their snapshots.

A view's live part (:mod:`opd_nb.notebook.display`) is a widget view, which a reopened notebook can
show only from saved widget state, and JupyterLab saves none by default; an autosave after a
kernel-less reopen empties what there was. So whenever a notebook is saved, the server drops our live
parts (the outputs our metadata key marks ``live``, never anyone else's) and the file keeps each
view's snapshot part: a reopen, an autosave, ``nbconvert`` and GitHub all show the view's last state.
The page that saved keeps its widgets: the hook changes what is written, not the page's model.

Enabled by ``jupyter-config/jupyter_server_config.d/opd_nb.json``, which the package installs into
the environment's ``etc/jupyter``. A server from another environment has no hook: the live part is
then saved as before (restored from widget state where it was saved), with the snapshot part below it.
"""

from __future__ import annotations

from typing import Any

from opd_nb.notebook.display import LIVE, OURS


def _ours_live(output: Any) -> bool:
    meta = output.get("metadata") if isinstance(output, dict) else None
    mark = meta.get(OURS) if isinstance(meta, dict) else None
    return isinstance(mark, dict) and mark.get("part") == LIVE


def drop_live_parts(nb: Any) -> int:
    """Remove our live parts from a notebook's JSON, in place; returns how many were removed."""
    dropped = 0
    for cell in nb.get("cells", []) if isinstance(nb, dict) else []:
        outputs = cell.get("outputs") if isinstance(cell, dict) else None
        if not isinstance(outputs, list):
            continue
        kept = [o for o in outputs if not _ours_live(o)]
        dropped += len(outputs) - len(kept)
        if len(kept) != len(outputs):
            cell["outputs"] = kept
    return dropped


def pre_save(model: dict[str, Any], **_: Any) -> None:
    """The contents manager's pre-save hook: notebooks only, and only their content."""
    if model.get("type") == "notebook" and isinstance(model.get("content"), dict):
        drop_live_parts(model["content"])


def _jupyter_server_extension_points() -> list[dict[str, str]]:
    return [{"module": "opd_nb.notebook.save_hook"}]


def _load_jupyter_server_extension(serverapp: Any) -> None:
    serverapp.contents_manager.register_pre_save_hook(pre_save)
    serverapp.log.info("opd_nb: notebooks are saved with our views' snapshots (live parts dropped)")
