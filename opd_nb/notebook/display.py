"""How every notebook view displays itself: the live widget and a static snapshot, in one output.

A view's output carries its widget view (live while the kernel runs) *and* a ``text/html`` snapshot
(what an ``nbconvert`` export or a frontend without widgets shows), plus ``text/plain``. A view that
changes after it was displayed (a monitor's jobs end, an answer arrives) refreshes that output through
its ``display_id``: the same cell, never a new one.

Why a view drops its widget once it is *final* (its jobs ended, its evaluation finished, its answer
arrived): JupyterLab and Notebook 7 prefer the widget view over the snapshot, and a reopened notebook
has no widget model for it unless widget state was saved, so the output would read "Error displaying
widget: model not found". A final view's output is the snapshot alone (its interactive chart and
tables need no kernel), and its widgets are closed, so no stale state is saved with the notebook
either. A view that is still live when the notebook is saved reopens from the saved widget state,
which JupyterLab writes only with its ``saveState`` setting on (``binder/`` turns it on; README).
"""

from __future__ import annotations

import threading
import uuid
from typing import Any

WIDGET_VIEW = "application/vnd.jupyter.widget-view+json"


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


class LiveView:
    """The display plumbing of the notebook's views: widget view + static snapshot, by display id.

    A view supplies :meth:`widget` (its ipywidgets box, or None without ipywidgets), :meth:`to_html`
    (the snapshot) and ``__str__``; it says when it is :attr:`final`, calls :meth:`_refresh_static`
    when its snapshot changed, and :meth:`_drop_widgets` forgets the widgets once they were closed.
    """

    _display_id: str | None = None
    _shown_live: bool = False  # the displayed output still carries the widget view
    _display_lock = threading.RLock()  # one display or update at a time (a view may refresh while shown)

    @property
    def final(self) -> bool:
        """True once nothing the view shows can change or be clicked: its output is the snapshot alone."""
        return False

    def widget(self) -> Any:  # pragma: no cover - overridden
        return None

    def to_html(self) -> str:  # pragma: no cover - overridden
        return ""

    def _drop_widgets(self) -> Any:
        """Forget the widgets (a later display builds new ones); returns the old root to close."""
        return None

    def _repr_mimebundle_(self, include: Any = None, exclude: Any = None) -> dict[str, Any]:
        bundle: dict[str, Any] = {"text/plain": str(self), "text/html": self.to_html()}
        if in_kernel() and not self.final:
            box = self.widget()
            if box is not None:
                view = box._repr_mimebundle_()
                view = view[0] if isinstance(view, tuple) else view
                bundle.update({k: v for k, v in (view or {}).items() if k != "text/plain"})
        return bundle

    def _ipython_display_(self) -> None:
        from IPython.display import display

        with self._display_lock:
            self._display_id = self._display_id or f"opd-view-{uuid.uuid4().hex[:12]}"
            bundle = self._repr_mimebundle_()
            self._shown_live = WIDGET_VIEW in bundle
            display(bundle, raw=True, display_id=self._display_id)
        if self._shown_live and self.final:  # it ended while being displayed: show the end
            self._refresh_static()
        self._displayed()

    def _displayed(self) -> None:
        """Called once the view is on screen (a view that follows a running job starts here)."""

    def _refresh_static(self) -> None:
        """Swap the displayed output for the current one (our own display id, never a new cell). A final
        view's output becomes its snapshot alone, and then its widgets are closed."""
        if self._display_id is None or not in_kernel():
            return
        try:
            from IPython.display import update_display

            with self._display_lock:
                bundle = self._repr_mimebundle_()
                update_display(bundle, raw=True, display_id=self._display_id)
                was_live, self._shown_live = self._shown_live, WIDGET_VIEW in bundle
            if was_live and not self._shown_live:
                old = self._drop_widgets()
                if old is not None:
                    close_tree(old)  # after the update: the frontend shows the snapshot already
        except Exception:  # noqa: BLE001 - a closed frontend must not kill the view's thread
            pass
