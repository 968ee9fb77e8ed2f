"""Chat widget (``%opd chat NAME``): talk to a deployed (or base) model, the answer streamed in.

Like the job monitor: the answer streams in a background thread that **only sets widget state**
(the assistant bubble's HTML, the buttons), so the kernel stays free and nothing lands in another
cell; ``_repr_mimebundle_`` returns the widget view plus a static ``text/html`` snapshot of the
conversation, refreshed through the output's ``display_id`` after each answer. History is kept
(every turn goes to the model), and Reset starts over.

A question asked from code (``%opd chat NAME "question"``, or ``chat.send``) is a question and an
answer: once the answer arrived the view is :attr:`final`, and its output becomes the conversation's
snapshot alone, which a saved notebook reopens as anywhere. ``chat.send`` asks again (the live view
comes back while the answer streams). A chat someone types in (its Send button) stays a live widget.
"""

from __future__ import annotations

import threading
from typing import Any

from opd_nb.errors import OpdError
from opd_nb.notebook.display import LiveView
from opd_nb.views import render, theme


def _bubble(role: str, text: str, *, pending: bool = False) -> str:
    who = {"user": "you", "assistant": "model", "system": "system"}.get(role, role)
    color = {"user": "rgba(59,130,246,.14)", "system": "rgba(234,179,8,.16)"}.get(role, theme.TINT)
    cursor = " ▍" if pending else ""
    return (
        f'<div style="background:{color};border-radius:6px;padding:4px 8px;margin:3px 0">'
        f"<b>{who}</b><pre style='margin:2px 0;white-space:pre-wrap'>{render.esc(text)}{cursor}</pre></div>"
    )


class ChatWidget(LiveView):
    """A conversation with `model` over the chat API (the same on Bailian and ``opd serve``)."""

    def __init__(
        self,
        model: str,
        client: Any = None,
        *,
        system: str | None = None,
        max_tokens: int | None = None,
        temperature: float | None = None,
    ):
        self.model = model
        self._client = client
        self.system = system
        self.params = {"max_tokens": max_tokens, "temperature": temperature}
        self.messages: list[dict[str, str]] = [{"role": "system", "content": system}] if system else []
        self.partial: str | None = None  # the answer being streamed
        self.error: str | None = None
        self._thread: threading.Thread | None = None
        self._lock = threading.Lock()
        self._w: dict[str, Any] | None = None
        self._typed = False  # its Send button was used: a conversation in the widget, kept live

    @property
    def client(self) -> Any:
        if self._client is None:
            from opd_nb.client import JobClient

            self._client = JobClient()
        return self._client

    @property
    def busy(self) -> bool:
        return self._thread is not None and self._thread.is_alive()

    @property
    def final(self) -> bool:
        """An answer arrived to a question asked from code, and none is streaming."""
        with self._lock:
            answered = any(m["role"] == "assistant" for m in self.messages)
            return answered and self.partial is None and not self._typed

    def _drop_widgets(self) -> Any:
        old, self._w = self._w, None
        return None if old is None else old["box"]

    # ---- talking ------------------------------------------------------------------------------
    def send(self, text: str, *, wait: bool = False, timeout_s: float | None = 600) -> str | None:
        """Send a user message; the answer streams in the background (`wait`: block and return it)."""
        if not str(text).strip():
            raise OpdError("the message is empty", fix="type something to send")
        if self.busy:
            raise OpdError("an answer is still streaming", fix="wait for it (or press Reset afterwards)")
        with self._lock:
            self.messages.append({"role": "user", "content": str(text)})
            self.partial, self.error = "", None
        self._thread = threading.Thread(target=self._answer, name="opd-chat", daemon=True)
        self._thread.start()
        self._render()
        if not self._shown_live:  # it was showing its snapshot: the live view streams the answer
            self._refresh_static()
        if wait:
            self.wait(timeout_s)
            if self.error:
                raise OpdError(self.error)
            return self.messages[-1]["content"]
        return None

    def wait(self, timeout_s: float | None = 600) -> ChatWidget:
        if self._thread is not None:
            self._thread.join(timeout_s)
            if self._thread.is_alive():
                raise OpdError(f"no answer after {timeout_s}s", fix="wait again, or Reset")
        return self

    def _answer(self) -> None:
        """The streaming thread: accumulates pieces and sets widget values, nothing else."""
        with self._lock:
            history = list(self.messages)
        try:
            for piece in self.client.chat_stream(self.model, history, **self.params):
                with self._lock:
                    self.partial = (self.partial or "") + piece
                self._render()
        except OpdError as exc:
            self.error = str(exc)
        except Exception as exc:  # noqa: BLE001 - a broken connection must not kill the widget
            self.error = f"{type(exc).__name__}: {exc}"
        with self._lock:
            if self.error is None:
                self.messages.append({"role": "assistant", "content": self.partial or ""})
            else:
                self.messages.pop()  # the question that got no answer: it can be sent again
            self.partial = None
        self._render()
        self._refresh_static(force=True)

    def reset(self) -> None:
        """Forget the conversation (the system message stays)."""
        if self.busy:
            raise OpdError("an answer is still streaming", fix="wait for it, then Reset")
        with self._lock:
            self.messages = [{"role": "system", "content": self.system}] if self.system else []
            self.error = None
        self._render()
        self._refresh_static()

    # ---- views --------------------------------------------------------------------------------
    def _conversation_html(self) -> str:
        with self._lock:
            parts = [_bubble(m["role"], m["content"]) for m in self.messages]
            if self.partial is not None:
                parts.append(_bubble("assistant", self.partial, pending=True))
            error = self.error
        if error:
            parts.append(f'<div class="bad">{render.esc(error)}</div>')
        if not parts:
            parts.append("<i>no messages yet</i>")
        return "".join(parts)

    def to_html(self) -> str:
        more = ""
        if self.final:  # the snapshot alone: say how to go on
            more = (
                "<div><small>ask again with <code>.send(&quot;…&quot;)</code> on this chat, or open a chat "
                f"box with <code>%opd chat {render.esc(self.model)}</code></small></div>"
            )
        return render.box(self._conversation_html() + more, title=f"chat with {self.model}")

    def __str__(self) -> str:
        lines = [f"chat with {self.model}"]
        lines += [f"{m['role']}: {m['content']}" for m in self.messages]
        return "\n".join(lines)

    def as_of(self) -> str:
        with self._lock:
            n = len(self.messages)
        return f"{n} message{'s' if n != 1 else ''}"

    def __repr__(self) -> str:
        return f"ChatWidget({self.model!r}, {len(self.messages)} messages)"

    def _ensure_widgets(self) -> dict[str, Any] | None:
        if self._w is None:
            try:
                import ipywidgets as W
            except ImportError:
                return None
            history = W.HTML()
            text = W.Textarea(
                placeholder="Message (Shift+Enter for a new line)", layout=W.Layout(width="70%")
            )
            send = W.Button(description="Send", button_style="primary", icon="paper-plane")
            reset = W.Button(description="Reset", icon="undo")
            status = W.HTML()
            send.on_click(lambda _b: self._on_send())
            reset.on_click(lambda _b: self._on_reset())
            box = W.VBox([history, W.HBox([text, send, reset]), status])
            box.add_class("opd-chat")
            self._w = {
                "box": box,
                "history": history,
                "text": text,
                "send": send,
                "reset": reset,
                "status": status,
            }
            self._render()
        return self._w

    def _on_send(self) -> None:
        w = self._w or {}
        text = w["text"].value if w else ""
        self._typed = True
        try:
            self.send(text)
            w["text"].value = ""
        except OpdError as exc:
            w["status"].value = theme.status_span("bad", render.esc(str(exc)))

    def _on_reset(self) -> None:
        try:
            self.reset()
        except OpdError as exc:
            (self._w or {})["status"].value = theme.status_span("bad", render.esc(str(exc)))

    def _render(self) -> None:
        """Push the conversation into the widgets (trait assignments only: thread-safe)."""
        w = self._w
        if w is None:
            return
        w["history"].value = render.box(self._conversation_html())
        busy = self.partial is not None
        w["send"].disabled = busy
        w["reset"].disabled = busy
        w["status"].value = f"<small>{'answering…' if busy else f'{self.model} ready'}</small>"

    def widget(self) -> Any:
        w = self._ensure_widgets()
        return None if w is None else w["box"]
