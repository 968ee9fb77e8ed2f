"""Probe view (``%opd probe WS``): the teacher's and the student's score distributions side by side, the
verdicts and the lowest-scoring teacher answers.

A probe is a few dozen chat calls, so the cell runs it and then shows the finished result: the view
is :attr:`final` from the start, its output the static snapshot alone (an inline SVG and tables), so a
saved notebook reopens showing it with no kernel and no widget state.
"""

from __future__ import annotations

from typing import Any

from opd_nb.notebook.display import LiveView


class ProbeView(LiveView):
    def __init__(self, result: Any):
        self.result = result  # ProbeResult

    @property
    def final(self) -> bool:
        return True

    def to_html(self) -> str:
        return self.result._repr_html_()

    def __str__(self) -> str:
        return str(self.result)
