"""How every notebook view displays itself: the live widget and a saved snapshot, as two outputs.

A view shown in a kernel writes two outputs, each marked with our output metadata key (:data:`OURS`):
its *live* part (the widget view alone) and its *snapshot* part (``text/html`` and ``text/plain``:
what a reopened notebook, an ``nbconvert`` export or GitHub shows). The live widget hides the
snapshot part in its own page with a style rule, so the page shows each view once.

Why two outputs: JupyterLab's widget renderer builds a new widget view whenever its output is updated,
even with the same widget (tests/test_browser_saved_live.py sees it: zoom and selection are lost; its
``renderModel`` also keeps the old view in its panel), so the widget's output is never updated while
the view is live; the snapshot part is, through its own ``display_id``, whenever what
the view shows moved (throttled, :data:`SNAPSHOT_EVERY_S`). While live, the snapshot says it is the
last state seen (:func:`as_of_line`: "as of step 58, 13:08 — re-run this cell to reconnect") and holds
no control that needs a kernel.

Why the live part must not reach the file: a reopened notebook has no widget model for it unless
widget state was saved (JupyterLab's ``saveState``, off by default; a reopen plus an autosave empties
it), and the output would then read "Error displaying widget: model not found". ``notebook/save_hook``,
a Jupyter server extension the package enables, drops our live parts whenever a notebook is saved, so
the file holds the snapshots. A final view (its jobs ended, its evaluation finished, its answer
arrived) empties its live part itself and closes its widgets: its snapshot alone is its output.
"""

from __future__ import annotations

import html
import threading
import time
import uuid
from typing import Any

WIDGET_VIEW = "application/vnd.jupyter.widget-view+json"
OURS = "opd_nb"  # our output metadata key: {"opd_nb": {"part": "live" | "snapshot"}}
LIVE, SNAPSHOT = "live", "snapshot"
SNAPSHOT_EVERY_S = 10.0  # a moving view refreshes its saved snapshot at most this often
RECONNECT = "re-run this cell to reconnect"


def in_kernel() -> bool:
    """True in a Jupyter kernel (widgets can render), False in terminal IPython / plain Python."""
    try:
        from IPython import get_ipython
    except ImportError:
        return False
    ip = get_ipython()
    return ip is not None and getattr(ip, "kernel", None) is not None


def close_tree(widget: Any) -> None:
    """Close a widget, every widget inside it and their layout and style models (so none of them is
    left in the frontend, or in the widget state a notebook saves)."""
    for child in getattr(widget, "children", ()) or ():
        close_tree(child)
    for part in (widget, getattr(widget, "layout", None), getattr(widget, "style", None)):
        close = getattr(part, "close", None)
        if callable(close):
            close()


def as_of_line(position: str, when: float) -> str:
    """What a live view's snapshot says of itself: the last state seen, and how to get the view back."""
    clock = time.strftime("%H:%M", time.localtime(when))
    return f"as of {position}, {clock} — {RECONNECT}" if position else f"as of {clock} — {RECONNECT}"


def as_of_html(line: str) -> str:
    return (
        '<div class="opd-as-of" style="margin:2px 0 6px;padding:2px 8px;border-left:3px solid #b58900;'
        f'font-size:90%;color:inherit"><b>saved view</b>, {html.escape(line)}</div>'
    )


def hide_snapshot_css(view_id: str) -> str:
    """The style the live widget carries: its page shows the view once (the snapshot part hidden)."""
    sel = f'.opd-saved-view[data-opd-view="{view_id}"]'
    return f"<style>.jp-OutputArea-child:has({sel}) {{display: none}} {sel} {{display: none}}</style>"


def marked(part: str) -> dict[str, Any]:
    return {OURS: {"part": part}}


class LiveView:
    """The display plumbing of the notebook's views: live part + snapshot part, by display id.

    A view supplies :meth:`widget` (its ipywidgets box, or None without ipywidgets), :meth:`to_html`
    (the snapshot), ``__str__`` and :meth:`as_of` (where it is: "step 58"); it says when it is
    :attr:`final`, calls :meth:`_refresh_static` when what it shows moved (as often as it likes: the
    snapshot is throttled), and :meth:`_drop_widgets` forgets the widgets once they were closed.
    """

    _display_id: str | None = None
    _shown_live: bool = False  # the live part shows the widget view
    _shown_final: bool = False  # the snapshot shown is the final one
    _live_root: Any = None  # the widget shown: the view's box under its style
    _snapshot_at: float = 0.0
    _snapshot_key: str | None = None
    _display_lock = threading.RLock()  # one display or update at a time (a view may refresh while shown)

    @property
    def final(self) -> bool:
        """True once nothing the view shows can change or be clicked: its output is the snapshot alone."""
        return False

    def widget(self) -> Any:  # pragma: no cover - overridden
        return None

    def to_html(self) -> str:  # pragma: no cover - overridden
        return ""

    def as_of(self) -> str:
        """Where the view is ("step 58/192"); "" where only the time says it."""
        return ""

    def _drop_widgets(self) -> Any:
        """Forget the widgets (a later display builds new ones); returns the old root to close."""
        return None

    # ---- the two parts --------------------------------------------------------------------------
    def _snapshot_bundle(self, final: bool, position: str) -> dict[str, Any]:
        """The saved part: the snapshot, headed while live by the line saying it is the last state."""
        body, text = self.to_html(), str(self)
        if not final:
            line = as_of_line(position, time.time())
            body, text = as_of_html(line) + body, f"{line}\n{text}"
        view_id = self._display_id or ""
        return {
            "text/plain": text,
            "text/html": f'<div class="opd-saved-view" data-opd-view="{view_id}">{body}</div>',
        }

    def _live_bundle(self, final: bool) -> dict[str, Any]:
        """The live part: the widget view under its style, or nothing (final, or no ipywidgets)."""
        if final or not in_kernel():
            return {}
        if self._live_root is None:
            box = self.widget()
            if box is None:
                return {}
            import ipywidgets as W

            self._live_root = W.VBox([W.HTML(hide_snapshot_css(self._display_id or "")), box])
            self._live_root.add_class("opd-live-view")
        view = self._live_root._repr_mimebundle_()
        view = view[0] if isinstance(view, tuple) else view
        return {k: v for k, v in (view or {}).items() if k == WIDGET_VIEW}

    def _repr_mimebundle_(self, include: Any = None, exclude: Any = None) -> dict[str, Any]:
        return self._snapshot_bundle(self.final, self.as_of())

    def _ipython_display_(self) -> None:
        from IPython.display import display

        with self._display_lock:
            self._display_id = self._display_id or f"opd-view-{uuid.uuid4().hex[:12]}"
            final = self.final
            live = self._live_bundle(final)
            self._shown_live = bool(live)
            if live:  # a view final when shown (a finished job's) has no live part: one output
                display(live, raw=True, display_id=f"{self._display_id}-live", metadata=marked(LIVE))
            self._show_snapshot(display, final)
        if self.final != final:  # it ended while being displayed: show the end
            self._refresh_static()
        self._displayed()

    def _show_snapshot(self, show: Any, final: bool) -> None:
        position = self.as_of()
        bundle = self._snapshot_bundle(final, position)
        self._snapshot_at, self._snapshot_key = time.monotonic(), f"{final}|{position}"
        self._shown_final = final
        show(bundle, raw=True, display_id=self._display_id, metadata=marked(SNAPSHOT))

    def _displayed(self) -> None:
        """Called once the view is on screen (a view that follows a running job starts here)."""

    def _refresh_static(self, *, force: bool = False) -> None:
        """Bring the displayed parts up to date (our own display ids, never a new cell): the snapshot
        when the view moved (at most every :data:`SNAPSHOT_EVERY_S` while live), or now with `force`
        (a last change, or one :meth:`as_of` does not show: a saved form); the live part when the view
        went final (then its widgets are closed) or live again."""
        if self._display_id is None or not in_kernel():
            return
        try:
            from IPython.display import update_display

            with self._display_lock:
                final = self.final  # read once: both parts agree
                if final != self._shown_final:
                    live = self._live_bundle(final)
                    update_display(
                        live, raw=True, display_id=f"{self._display_id}-live", metadata=marked(LIVE)
                    )
                    was_live, self._shown_live = self._shown_live, bool(live)
                    self._show_snapshot(update_display, final)
                    if was_live and not self._shown_live:
                        self._close_live()
                elif force or (
                    f"{final}|{self.as_of()}" != self._snapshot_key
                    and time.monotonic() - self._snapshot_at >= SNAPSHOT_EVERY_S
                ):
                    self._show_snapshot(update_display, final)
        except Exception:  # noqa: BLE001 - a closed frontend must not kill the view's thread
            pass

    def _close_live(self) -> None:
        """After the update (the frontend shows the snapshot already): close the widgets."""
        root, self._live_root = self._live_root, None
        old = self._drop_widgets()
        for part in (root, old):
            if part is not None:
                close_tree(part)
