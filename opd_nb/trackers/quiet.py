"""Keep the trackers' own prints out of our output, from the thread that writes to them only.

trackio prints on init, on each alert and on finish; MLflow logs its database migrations. In a
terminal those lines would break `opd watch`'s live view, under `opd mcp` they are not ours to say,
and in a notebook the monitor's polling thread must never print. A context manager cannot swap
``sys.stdout`` for one thread only, so while any thread is muted both streams are a pass-through
proxy that drops the writes of muted threads and forwards every other thread's; the last one out
puts the original streams back (unless someone else replaced them meanwhile).
"""

from __future__ import annotations

import contextlib
import sys
import threading
from collections.abc import Iterator
from typing import Any, TextIO

_lock = threading.Lock()
_muted: set[int] = set()
_installed: dict[str, _Proxy] = {}


class _Proxy:
    """A text stream that forwards to `inner` unless the writing thread is muted."""

    def __init__(self, inner: TextIO):
        self.inner = inner

    def write(self, text: str) -> int:
        if threading.get_ident() in _muted:
            return len(text)
        return self.inner.write(text)

    def flush(self) -> None:
        if threading.get_ident() not in _muted:
            self.inner.flush()

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)


def _install() -> None:
    for name in ("stdout", "stderr"):
        current = getattr(sys, name)
        if not isinstance(current, _Proxy):
            proxy = _Proxy(current)
            _installed[name] = proxy
            setattr(sys, name, proxy)


def _uninstall() -> None:
    for name, proxy in list(_installed.items()):
        if getattr(sys, name) is proxy:
            setattr(sys, name, proxy.inner)
        del _installed[name]


@contextlib.contextmanager
def muted() -> Iterator[None]:
    """Drop what this thread prints (stdout and stderr) while inside; other threads print as before."""
    me = threading.get_ident()
    with _lock:
        if me in _muted:  # nested: the outer block unmutes
            nested = True
        else:
            nested = False
            _muted.add(me)
            _install()
    try:
        yield
    finally:
        if not nested:
            with _lock:
                _muted.discard(me)
                if not _muted:
                    _uninstall()
