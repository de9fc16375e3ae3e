"""A figure's caption and alt text, written in the code cell that draws it (the site and
the Chinese edition read them: tools/reading_cells.py, tools/i18n_catalogues.py)."""

from __future__ import annotations

import re

# A figure's caption and alt text, written in its cell as Quarto writes cell options; a
# line `#|` indented by two more spaces continues the option above it:
#   #| fig-cap: Attention weights of the running example: each row sums to 1.
#   #| fig-alt: A 5 by 5 heat map whose brightest square in each row is on
#   #|   the diagonal.
FIGURE_OPTION = re.compile(r"^\s*#\|\s*(fig-cap|fig-alt)\s*:\s*(.*?)\s*$")
OPTION_CONTINUED = re.compile(r"^\s*#\|\s{2,}(\S.*?)\s*$")


def figure_options(source: str) -> tuple[dict[str, str], str]:
    """({'fig-cap': ..., 'fig-alt': ...}, the source without those lines) for a cell's
    `#| fig-cap:` / `#| fig-alt:` lines and their continuations."""
    options: dict[str, str] = {}
    kept: list[str] = []
    current = None
    for line in source.splitlines():
        if match := FIGURE_OPTION.match(line):
            current = match.group(1)
            options[current] = match.group(2)
        elif current and (match := OPTION_CONTINUED.match(line)):
            options[current] += " " + match.group(1)
        else:
            current = None
            kept.append(line)
    return {k: v.strip().strip("\"'") for k, v in options.items()}, "\n".join(kept)
