"""The docs' command, `python -m pytest test_reward.py -v`, runs the reward's tests from here.

The tests live in tests/test_reward.py (with the other tests, which `pytest` alone runs, and out of the
zip uploaded for the function); this file only gathers them under the name the docs use.
"""

from tests.test_reward import *  # noqa: F403
