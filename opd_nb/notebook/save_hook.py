"""The Jupyter server extension that saves our views as their snapshots.

A view's live part (:mod:`opd_nb.notebook.display`) is a widget view, which a reopened notebook can
show only from saved widget state, and JupyterLab saves none by default; an autosave after a
kernel-less reopen empties what there was. So whenever a notebook is saved, the server drops our live
parts (the outputs our metadata key marks ``live``, never anyone else's) and the file keeps each
view's snapshot part: a reopen, an autosave, ``nbconvert`` and GitHub all show the view's last state.
Widget state saved with the notebook (``saveState``) loses the models only those live parts showed.
The page that saved keeps its widgets: the hook changes what is written, not the page's model.

Enabled by ``jupyter-config/jupyter_server_config.d/opd_nb.json``, which the package installs into
the environment's ``etc/jupyter``. A server from another environment has no hook: the live part is
then saved as before (restored from widget state where it was saved), with the snapshot part below it.
"""

from __future__ import annotations

import json
import re
from typing import Any

from opd_nb.notebook.display import LIVE, OURS, WIDGET_VIEW

WIDGET_STATE = "application/vnd.jupyter.widget-state+json"
_REF = re.compile(r"IPY_MODEL_([\w-]+)")


def _ours_live(output: Any) -> bool:
    meta = output.get("metadata") if isinstance(output, dict) else None
    mark = meta.get(OURS) if isinstance(meta, dict) else None
    return isinstance(mark, dict) and mark.get("part") == LIVE


def _view_model(output: Any) -> str | None:
    data = output.get("data") if isinstance(output, dict) else None
    view = data.get(WIDGET_VIEW) if isinstance(data, dict) else None
    model = view.get("model_id") if isinstance(view, dict) else None
    return model if isinstance(model, str) else None


def _reachable(state: dict[str, Any], roots: set[str]) -> set[str]:
    """The widget models `roots` name, and every model those name (children, layouts, styles)."""
    seen: set[str] = set()
    todo = [r for r in roots if r in state]
    while todo:
        model = todo.pop()
        if model not in seen:
            seen.add(model)
            todo += [r for r in _REF.findall(json.dumps(state[model])) if r in state]
    return seen


def _prune_state(nb: dict[str, Any], dropped: set[str], shown: set[str]) -> None:
    """Saved widget state (JupyterLab's ``saveState``) loses the models only our dropped live parts
    showed: no output names them any more. A model anything else shows stays."""
    widgets = nb.get("metadata", {}).get("widgets", {})
    state = widgets.get(WIDGET_STATE, {}).get("state") if isinstance(widgets, dict) else None
    if not isinstance(state, dict) or not dropped:
        return
    for model in _reachable(state, dropped) - _reachable(state, shown):
        del state[model]


def drop_live_parts(nb: Any) -> int:
    """Remove our live parts from a notebook's JSON (and the saved widget state only they used), in
    place; returns how many were removed."""
    dropped: set[str] = set()
    shown: set[str] = set()
    count = 0
    for cell in nb.get("cells", []) if isinstance(nb, dict) else []:
        outputs = cell.get("outputs") if isinstance(cell, dict) else None
        if not isinstance(outputs, list):
            continue
        kept = [o for o in outputs if not _ours_live(o)]
        dropped |= {m for o in outputs if _ours_live(o) and (m := _view_model(o))}
        shown |= {m for o in kept if (m := _view_model(o))}
        count += len(outputs) - len(kept)
        if len(kept) != len(outputs):
            cell["outputs"] = kept
    if count:
        _prune_state(nb, dropped, shown)
    return count


def pre_save(model: dict[str, Any], **_: Any) -> None:
    """The contents manager's pre-save hook: notebooks only, and only their content."""
    if model.get("type") == "notebook" and isinstance(model.get("content"), dict):
        drop_live_parts(model["content"])


def _jupyter_server_extension_points() -> list[dict[str, str]]:
    return [{"module": "opd_nb.notebook.save_hook"}]


def _load_jupyter_server_extension(serverapp: Any) -> None:
    serverapp.contents_manager.register_pre_save_hook(pre_save)
    serverapp.log.info("opd_nb: notebooks are saved with our views' snapshots (live parts dropped)")
