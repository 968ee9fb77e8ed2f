"""Every HTTP client opd-nb opens, on one TLS context per process.

Why: httpx builds a new ``ssl.SSLContext`` for each client it makes (``httpx.get`` makes one per call),
and building one loads the CA bundle: 19-23 ms of CPU here, whether or not the URL is ``https``. The
health waits asked ten times a second and built one each time: a function server's start, a process
that polls a job, the control plane's health check. The context here is httpx's own default
(``httpx.create_ssl_context``: certifi's bundle, or ``SSL_CERT_FILE``/``SSL_CERT_DIR`` where the
environment is trusted), made once and shared, as an ``SSLContext`` is meant to be (each connection
wraps its own socket). A caller that passes its own ``verify`` keeps it.

The rest of the package opens clients only through these functions (``tests/test_http_client.py``
holds it to that), so the next client cannot go back to one context per call.
"""

from __future__ import annotations

import functools
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import ssl
    from contextlib import AbstractContextManager

    import httpx


def tls_context(trust_env: bool = True) -> ssl.SSLContext:
    """httpx's default context, built once per process (per ``trust_env``, as httpx reads it)."""
    return _built(bool(trust_env))


@functools.cache
def _built(trust_env: bool) -> ssl.SSLContext:  # one cache key per value, however the caller spells it
    import httpx

    return httpx.create_ssl_context(trust_env=trust_env)


def _shared(kwargs: dict[str, Any]) -> dict[str, Any]:
    if "verify" not in kwargs:
        kwargs["verify"] = tls_context(kwargs.get("trust_env", True))
    return kwargs


def client(**kwargs: Any) -> httpx.Client:
    """``httpx.Client(**kwargs)`` on the shared context."""
    import httpx

    return httpx.Client(**_shared(kwargs))


def async_client(**kwargs: Any) -> httpx.AsyncClient:
    """``httpx.AsyncClient(**kwargs)`` on the shared context."""
    import httpx

    return httpx.AsyncClient(**_shared(kwargs))


def get(url: httpx.URL | str, **kwargs: Any) -> httpx.Response:
    """``httpx.get`` on the shared context."""
    import httpx

    return httpx.get(url, **_shared(kwargs))


def post(url: httpx.URL | str, **kwargs: Any) -> httpx.Response:
    """``httpx.post`` on the shared context."""
    import httpx

    return httpx.post(url, **_shared(kwargs))


def stream(method: str, url: httpx.URL | str, **kwargs: Any) -> AbstractContextManager[httpx.Response]:
    """``httpx.stream`` on the shared context (a context manager, as httpx's)."""
    import httpx

    return httpx.stream(method, url, **_shared(kwargs))
