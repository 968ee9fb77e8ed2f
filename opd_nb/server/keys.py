"""How strong a server key must be to guard a port that other machines can reach.

Why a module of its own: `opd serve` refuses a weak key before it starts the app, so the check
must not import FastAPI (the CLI stays quick to start); :mod:`opd_nb.server.auth` applies the key.
"""

from __future__ import annotations

import math
from collections import Counter

MIN_KEY_CHARS = 16
MIN_KEY_BITS = 64  # length x the Shannon entropy of its characters
KEY_RECIPE = "python -c 'import secrets; print(secrets.token_urlsafe(32))'"


def key_bits(key: str) -> float:
    """A rough strength: length times the Shannon entropy per character ("aaaa...": 0, a random token: ~6/char)."""
    counts = Counter(key)
    return max(0.0, -len(key) * sum(n / len(key) * math.log2(n / len(key)) for n in counts.values()))


def key_problem(key: str) -> str | None:
    """Why a server key is too weak to guard a port other machines can reach (never quoting the key)."""
    if key != key.strip():
        return "the server key starts or ends with whitespace, which a Bearer header cannot carry"
    if len(key) < MIN_KEY_CHARS or key_bits(key) < MIN_KEY_BITS:
        return (
            f"the server key is too weak ({len(key)} characters, about {key_bits(key):.0f} bits): "
            f"use at least {MIN_KEY_CHARS} characters and {MIN_KEY_BITS} bits of entropy"
        )
    return None
