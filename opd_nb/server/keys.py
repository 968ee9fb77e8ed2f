"""How strong a server key must be to guard a port that other machines can reach.

Why a module of its own: `opd serve` refuses a weak key before it starts the app, so the check
must not import FastAPI (the CLI stays quick to start); :mod:`opd_nb.server.auth` applies the key.

Why an estimator: counting characters (or their Shannon entropy) passes keys that look long but are
guessed at once: ``abcdefghijklmnopqrstuvwxyz``, ``0123456789abcdef``, ``passwordpassword1234``,
``Password123!Password123!``, a keyboard row, four dictionary words, a repeated block. `zxcvbn`
(Dropbox's estimator, its maintained Python port) models exactly those patterns (dictionaries,
sequences, keyboard walks, repeats, l33t, dates) and estimates the guesses an attacker who knows them
needs. A key must need at least 10**:data:`MIN_KEY_GUESSES_LOG10` of them, with its separators
(spaces, ``-``, ``_``, ...) kept and dropped, since zxcvbn prices a separator like a random symbol:
``correct horse battery staple`` would pass otherwise. So a random key passes with about 18
characters or more (``secrets.token_urlsafe(32)`` has 43: about 10**43), a random diceware phrase
with 6 words or more, and 4 dictionary words do not (about 10**13 to 10**17). zxcvbn reads at most 72
characters: a longer key is judged by its first 72 (a prefix is never stronger than the whole).

A key is printable ASCII without whitespace: what an ``Authorization: Bearer`` header carries
unchanged (RFC 6750's token characters are a subset), so a key that passes here is one that a client
can send and the server compares byte for byte.
"""

from __future__ import annotations

import re

MIN_KEY_GUESSES_LOG10 = 18  # ~60 bits: years of online guessing at any rate this server answers
KEY_RECIPE = "python -c 'import secrets; print(secrets.token_urlsafe(32))'"
_ESTIMATED_CHARS = 72  # zxcvbn's own limit
_SEPARATORS = re.compile(r"[-_.,:;+=/|~*#@!]+")
_SENDABLE = re.compile(r"^[\x21-\x7e]+$")  # printable ASCII, no space: a Bearer header carries it as is


def key_guesses_log10(key: str) -> float:
    """log10 of the guesses zxcvbn estimates an attacker needs, separators kept and dropped (the lower)."""
    from zxcvbn import zxcvbn

    head = key[:_ESTIMATED_CHARS]
    forms = {head, _SEPARATORS.sub("", head)} - {""}
    return min((float(zxcvbn(form)["guesses_log10"]) for form in forms), default=0.0)


def key_problem(key: str) -> str | None:
    """Why a server key is too weak to guard a port other machines can reach (never quoting the key)."""
    if key != key.strip():
        return "the server key starts or ends with whitespace, which a Bearer header cannot carry"
    if not _SENDABLE.match(key):
        return (
            "the server key has a space, a control character or a non-ASCII character, which a Bearer "
            "header does not carry unchanged"
        )
    guesses = key_guesses_log10(key)
    if guesses < MIN_KEY_GUESSES_LOG10:
        return (
            f"the server key is too weak: it is guessable in about 10^{guesses:.0f} tries (words, "
            f"sequences, keyboard rows and repeats are tried first); a key needs 10^{MIN_KEY_GUESSES_LOG10}"
            " or more, e.g. 20 or more random characters"
        )
    return None
