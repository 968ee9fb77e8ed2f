"""Terminal tables whose names a user copies (a job id, a deployed model, an output id) print whole.

rich fits a table to the terminal by cutting cells with "…": in an 80-column terminal a deployed
model's name came out as ``qwen3.5-9b-ft-2…``, which cannot be copied into ``opd chat``. Here the
*whole* columns never wrap or shrink below their longest value, and the other columns fold (wrap
anywhere: every character stays). When the whole columns leave the others too little room, each row
prints as a block instead: its name on a line of its own, then one ``field: value`` line per column.
Cells are :class:`rich.text.Text`, so user text is never read as rich markup.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

MIN_FOLDED = 10  # below this width a folded column is harder to read than a block per row
_CELL_EDGES = 3  # a cell's two padding spaces and its border


class WholeNamesTable:
    """A rich renderable: ``columns`` over ``rows`` of Text, the columns in ``whole`` never cut."""

    def __init__(
        self, columns: Sequence[str], rows: Sequence[Sequence[Any]], *, whole: Sequence[int], title: str = ""
    ):
        self.columns = list(columns)
        self.rows = [list(r) for r in rows]
        self.whole = set(whole)
        self.title = title

    def _widths(self) -> list[int]:
        return [max([len(c), *(r[i].cell_len for r in self.rows)]) for i, c in enumerate(self.columns)]

    def fits(self, width: int) -> bool:
        """Whether a table with the whole columns at full width leaves every other column enough room."""
        widths = self._widths()
        need = 1 + sum(
            (w if i in self.whole else min(w, MIN_FOLDED)) + _CELL_EDGES for i, w in enumerate(widths)
        )
        return need <= width

    def _table(self) -> Any:
        from rich.table import Table

        table = Table(title=self.title or None)
        widths = self._widths()
        for i, name in enumerate(self.columns):
            if i in self.whole:
                table.add_column(name, no_wrap=True, min_width=widths[i])
            else:
                table.add_column(name, overflow="fold")
        for row in self.rows:
            table.add_row(*row)
        return table

    def _blocks(self) -> Any:
        from rich.console import Group
        from rich.text import Text

        first = min(self.whole) if self.whole else 0
        parts: list[Any] = [Text(self.title, style="italic")] if self.title else []
        for row in self.rows:
            name_line = row[first].copy()
            name_line.stylize("bold")
            parts.append(name_line)
            for i, name in enumerate(self.columns):
                if i != first and row[i].plain:
                    parts.append(Text(f"  {name}: ").append_text(row[i]))
        return Group(*parts)

    def __rich_console__(self, console: Any, options: Any) -> Any:
        yield self._table() if self.fits(options.max_width) else self._blocks()
