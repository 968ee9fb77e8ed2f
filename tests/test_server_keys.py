"""How strong a server key must be for a non-loopback bind (issue 37): guessable keys that look long
are refused by an estimator (zxcvbn), whatever their length; random keys and long random passphrases
pass. Each kind of guessable key the audit named has several members here."""

from __future__ import annotations

import random
import secrets

import pytest

from opd_nb.server.keys import KEY_RECIPE, MIN_KEY_GUESSES_LOG10, key_guesses_log10, key_problem
from opd_nb.server.runner import refuse_open_bind

GUESSABLE = {
    "a run of the alphabet": [
        "abcdefghijklmnopqrstuvwxyz",
        "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghij",
        "zyxwvutsrqponmlkjihgfedcba0123",
    ],
    "hex digits in order": [
        "0123456789abcdef0123456789abcdef",
        "0123456789ABCDEF0123456789ABCDEF",
        "fedcba9876543210fedcba9876543210",
    ],
    "a word repeated with digits": ["passwordpassword1234", "letmeinletmein123456", "adminadminadmin2024"],
    "a capitalised word with digits and a symbol, twice": [
        "Password123!Password123!",
        "Welcome2024!Welcome2024!",
        "Summer2023#Summer2023#",
    ],
    "a keyboard row": ["qwertyuiopasdfghjklzxcvbnm", "1qaz2wsx3edc4rfv5tgb6yhn", "qwertyuiop[]asdfghjkl;'"],
    "four dictionary words": [
        "correcthorsebatterystaple",
        "correct-horse-battery-staple",
        "purple.monkey.dishwasher.river",
        "Sunshine_Garden_Coffee_Table",
    ],
    "repeated blocks": ["abc123abc123abc123abc123", "k9Xk9Xk9Xk9Xk9Xk9Xk9Xk9X", "7f3a7f3a7f3a7f3a7f3a7f3a"],
    "too short to be random enough": ["Xq7#pL2v", "h4Kd9s", "aZ3$kQ9!mW2"],
}


def _diceware(seed: int, words: int = 6) -> str:
    """A random passphrase of `words` words drawn from 7,776 common English words (a diceware list's size)."""
    from zxcvbn.frequency_lists import FREQUENCY_LISTS

    pool = [w for w in FREQUENCY_LISTS["english_wikipedia"][:8000] if w.isalpha()][:7776]
    rng = random.Random(seed)
    return "-".join(rng.choice(pool) for _ in range(words))


STRONG = {
    **{f"token_urlsafe(32) #{i}": secrets.token_urlsafe(32) for i in range(3)},
    "token_hex(16)": secrets.token_hex(16),
    **{f"a random 6-word passphrase #{seed}": _diceware(seed) for seed in range(5)},
}


@pytest.mark.parametrize(
    "key",
    [k for keys in GUESSABLE.values() for k in keys],
    ids=[f"{kind}: {k}" for kind, keys in GUESSABLE.items() for k in keys],
)
def test_guessable_keys_are_refused_whatever_their_length(key):
    problem = key_problem(key)
    assert problem and "too weak" in problem and key not in problem, problem
    assert key_guesses_log10(key) < MIN_KEY_GUESSES_LOG10
    refusal = refuse_open_bind("0.0.0.0", key)
    assert refusal and KEY_RECIPE in refusal and "OPD_SERVE_API_KEY" in refusal and key not in refusal


@pytest.mark.parametrize("key", list(STRONG.values()), ids=list(STRONG))
def test_random_keys_and_long_random_passphrases_pass(key):
    assert key_problem(key) is None, key_guesses_log10(key)
    assert refuse_open_bind("0.0.0.0", key) is None and refuse_open_bind("::", key) is None


UNSENDABLE = {  # how a strong key is spoiled -> what the refusal names
    "a space before it": (lambda k: " " + k, "whitespace"),
    "a no-break space after it": (lambda k: k + "\u00a0", "whitespace"),
    "a no-break space before it": (lambda k: "\u00a0" + k, "whitespace"),
    "a space inside it": (lambda k: k[:20] + " " + k[20:], "space"),
    "a non-ASCII letter": (lambda k: k + "\u00e9", "non-ASCII"),
    "a control character": (lambda k: k[:20] + "\x07" + k[20:], "control character"),
}


@pytest.mark.parametrize("spoil, needle", list(UNSENDABLE.values()), ids=list(UNSENDABLE))
def test_a_key_a_bearer_header_cannot_carry_unchanged_is_refused(spoil, needle):
    key = spoil(secrets.token_urlsafe(32))
    problem = key_problem(key)
    assert problem and needle in problem and key.strip() not in problem, problem


def test_a_very_long_key_is_judged_by_its_first_72_characters():
    assert key_problem(secrets.token_urlsafe(300)) is None
    assert key_problem("a" * 72 + secrets.token_urlsafe(64)) is not None  # a guessable head stays guessable
