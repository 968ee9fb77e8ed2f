"""Eval view (``%opd eval WS --model A --model B``): the models side by side, rows that differ first.

The evaluation (:func:`opd_nb.experiments.evaluation.evaluate`) runs in a background thread that only sets
widget state (a progress bar, a status line, the result's HTML); the kernel stays free. Once it is
done the output becomes the result's side-by-side snapshot alone (through the output's
``display_id``; its tables sort with no kernel), so a saved notebook reopens as the comparison.
"""

from __future__ import annotations

import threading
from collections.abc import Sequence
from typing import Any

from opd_nb.errors import OpdError
from opd_nb.notebook.display import LiveView
from opd_nb.notebook.snapshot import hint, interactive
from opd_nb.views import render


class EvalView(LiveView):
    def __init__(
        self,
        workspace: str,
        models: Sequence[str],
        client: Any = None,
        *,
        rows: int | None = None,
        concurrency: int = 8,
        max_tokens: int | None = None,
        yes: bool = False,
    ):
        self.workspace = str(workspace)
        self.models = list(models)
        self._client = client
        self.options = {"rows": rows, "concurrency": concurrency, "max_tokens": max_tokens, "yes": yes}
        self.done_calls, self.total_calls = 0, 0
        self.result: Any = None  # EvalResult once finished
        self.error: OpdError | None = None
        self._finished = threading.Event()
        self._settled = threading.Event()
        self._thread: threading.Thread | None = None
        self._w: dict[str, Any] | None = None

    @property
    def client(self) -> Any:
        if self._client is None:
            from opd_nb.client import JobClient

            self._client = JobClient()
        return self._client

    def start(self) -> EvalView:
        if self._thread is None:
            self._thread = threading.Thread(target=self._run, name="opd-eval-view", daemon=True)
            self._thread.start()
        return self

    def _run(self) -> None:
        from opd_nb.experiments.evaluation import evaluate

        try:
            self.result = evaluate(
                self.workspace, self.models, client=self.client, progress=self._progress, **self.options
            )
        except OpdError as exc:
            self.error = exc
        except Exception as exc:  # noqa: BLE001 - shown in the view, re-raised by wait()
            self.error = OpdError(f"the evaluation failed: {type(exc).__name__}: {exc}")
        finally:
            self._finished.set()  # `done` is read by the render: the views show the end state
            self._render()
            self._refresh_static()
            self._settled.set()  # wait() returns after the snapshot went out, while its cell still runs

    def _progress(self, done: int, total: int) -> None:
        self.done_calls, self.total_calls = done, total
        self._render()
        self._refresh_static()  # the saved snapshot follows (throttled)

    def wait(self, timeout_s: float | None = 900) -> Any:
        """Block until the evaluation is done; returns the :class:`~opd_nb.experiments.evaluation.EvalResult`."""
        self.start()
        if not self._settled.wait(timeout_s):
            raise OpdError(f"the evaluation is still running after {timeout_s}s", fix="call wait() again")
        if self.error is not None:
            raise self.error
        return self.result

    @property
    def done(self) -> bool:
        return self._finished.is_set()

    @property
    def final(self) -> bool:
        """The evaluation finished (or failed): the output becomes the side-by-side snapshot."""
        return self.done

    def _drop_widgets(self) -> Any:
        old, self._w = self._w, None
        return None if old is None else old["box"]

    # ---- views --------------------------------------------------------------------------------
    def _status(self) -> str:
        if self.error is not None:
            return f'<span class="bad">{render.esc(str(self.error))}</span>'
        if self.result is not None:
            return f"<small>{render.esc(self.result.summary())} in {self.result.seconds:.0f}s</small>"
        return f"<small>evaluating {render.esc(', '.join(self.models))}: {self.done_calls}/{self.total_calls or '?'} calls</small>"

    def to_html(self) -> str:
        if self.result is not None:
            return interactive(
                hint("saved view: click a column to sort its rows", "sort the tables")
                + self.result._repr_html_()
            )
        return render.box(self._status(), title=f"eval of {self.workspace}")

    def __str__(self) -> str:
        if self.result is not None:
            return self.result.summary()
        return f"eval of {', '.join(self.models)} on {self.workspace}: " + (
            str(self.error) if self.error else f"{self.done_calls}/{self.total_calls} calls"
        )

    def as_of(self) -> str:
        return f"{self.done_calls}/{self.total_calls or '?'} calls"

    def __repr__(self) -> str:
        return f"EvalView({self.workspace!r}, {self.models!r}, done={self.done})"

    def _ensure_widgets(self) -> dict[str, Any] | None:
        if self._w is None:
            try:
                import ipywidgets as W
            except ImportError:
                return None
            bar = W.IntProgress(min=0, max=1, value=0, description="eval", layout=W.Layout(width="60%"))
            status, table = W.HTML(), W.HTML()
            box = W.VBox([bar, status, table])
            box.add_class("opd-eval")
            self._w = {"box": box, "bar": bar, "status": status, "table": table}
            self._render()
        return self._w

    def _render(self) -> None:
        """Trait assignments only (called from the evaluation thread)."""
        w = self._w
        if w is None:
            return
        w["bar"].max = max(1, self.total_calls)
        w["bar"].value = self.done_calls
        if self.done:
            w["bar"].bar_style = "danger" if self.error else "success"
        w["status"].value = render.box(self._status())
        w["table"].value = self.result._repr_html_() if self.result is not None else ""

    def widget(self) -> Any:
        w = self._ensure_widgets()
        return None if w is None else w["box"]
