"""How every notebook view displays itself: the live widget and a static snapshot, in one output.

A view's output carries its widget view (live while the kernel runs) *and* a ``text/html`` snapshot
(what a saved notebook, an ``nbconvert`` export or a frontend without widgets shows), plus
``text/plain``. A view that changes after it was displayed (a monitor's jobs end, an answer arrives)
refreshes that snapshot through the output's ``display_id``: the same cell, never a new one. So a
saved notebook shows the last state, with no kernel.
"""

from __future__ import annotations

import uuid
from typing import Any


def in_kernel() -> bool:
    """True in a Jupyter kernel (widgets can render), False in terminal IPython / plain Python."""
    try:
        from IPython import get_ipython
    except ImportError:
        return False
    ip = get_ipython()
    return ip is not None and getattr(ip, "kernel", None) is not None


class LiveView:
    """The display plumbing of the notebook's views: widget view + static snapshot, by display id.

    A view supplies :meth:`widget` (its ipywidgets box, or None without ipywidgets), :meth:`to_html`
    (the snapshot) and ``__str__``; it calls :meth:`_refresh_static` when its snapshot changed.
    """

    _display_id: str | None = None

    def widget(self) -> Any:  # pragma: no cover - overridden
        return None

    def to_html(self) -> str:  # pragma: no cover - overridden
        return ""

    def _repr_mimebundle_(self, include: Any = None, exclude: Any = None) -> dict[str, Any]:
        bundle: dict[str, Any] = {"text/plain": str(self), "text/html": self.to_html()}
        if in_kernel():
            box = self.widget()
            if box is not None:
                view = box._repr_mimebundle_()
                view = view[0] if isinstance(view, tuple) else view
                bundle.update({k: v for k, v in (view or {}).items() if k != "text/plain"})
        return bundle

    def _ipython_display_(self) -> None:
        from IPython.display import display

        self._display_id = self._display_id or f"opd-view-{uuid.uuid4().hex[:12]}"
        display(self._repr_mimebundle_(), raw=True, display_id=self._display_id)

    def _refresh_static(self) -> None:
        """Swap the displayed snapshot for the current one (our own display id, never a new cell)."""
        if self._display_id is None or not in_kernel():
            return
        try:
            from IPython.display import update_display

            update_display(self._repr_mimebundle_(), raw=True, display_id=self._display_id)
        except Exception:  # noqa: BLE001 - a closed frontend must not kill the view's thread
            pass
