"""Columns laid out as kubectl lays them out, so `edgeagent fleet` reads like `kubectl get`.

kubectl writes its tables through Go's tabwriter with a minimum cell width of 6 and a padding of 3: each
column is as wide as its longest cell plus three spaces (at least six), the last one is not padded, and
headers are upper case. An empty cell is shown as `<none>` by kubectl; here a dash says "not applicable"
(no plan, no hold) which `<none>` would not.
"""

from __future__ import annotations

from collections.abc import Sequence

MIN_WIDTH = 6
PADDING = 3


def render(headers: Sequence[str], rows: Sequence[Sequence[str]]) -> str:
    """Lines of the table, header first, each without trailing spaces, ending in a newline."""
    widths = [max([len(h)] + [len(r[i]) for r in rows]) for i, h in enumerate(headers)]
    lines = []
    for cells in [list(headers), *[list(r) for r in rows]]:
        parts = [cell.ljust(max(MIN_WIDTH, width + PADDING)) for cell, width in zip(cells[:-1], widths, strict=False)]
        lines.append(("".join(parts) + cells[-1]).rstrip())
    return "\n".join(lines) + "\n"
