"""Colours that read in the host's light and dark themes (WCAG AA, 4.5:1 for text), in one place.

Saved outputs carry plain HTML, so the views cannot ask the host for its theme at run time: a table
header or a bubble takes a translucent tint that works on either background, and the status colours
have a dark twin chosen by the selectors the hosts set (JupyterLab and Notebook 7:
``data-jp-theme-light="false"``; VS Code: ``body.vscode-dark``). A static picture (an ``<img>`` that
cannot inherit the page's colours) is inverted under those selectors, its hues turned back.
"""

from __future__ import annotations

from collections.abc import Mapping

LIGHT_BACKGROUND = "#ffffff"
DARK_BACKGROUND = "#111111"  # JupyterLab Dark's --jp-layout-color0, the darkest a view sits on
DARK_SELECTORS = ('[data-jp-theme-light="false"]', "body.vscode-dark")

TINT = "rgba(127,127,127,.14)"  # header cells, bubbles, lanes: a shade on either background
RULE = "rgba(127,127,127,.45)"  # borders
MUTED = "opacity:.8"  # secondary text keeps the host's text colour, a little fainter

Pair = tuple[str, str]  # (on a light background, on a dark background)

STATUS: dict[str, Pair] = {
    "ok": ("#1a7f37", "#3fb950"),
    "bad": ("#cf222e", "#ff7b72"),
    "warn": ("#9a6700", "#d29922"),
    "info": ("#0969da", "#58a6ff"),
}
# a span's kind in the trace view (its label and its bar), "OTHER" for a kind not named here
SPAN_KIND: dict[str, Pair] = {
    "CHAIN": ("#656d76", "#8c959f"),
    "ROLLOUT": ("#0969da", "#58a6ff"),
    "REWARD": ("#8250df", "#bc8cff"),
    "LLM": ("#1a7f37", "#3fb950"),
    "TOOL": ("#bc4c00", "#f0883e"),
    "OTHER": ("#57606a", "#8b949e"),
}
# the probe's two sides (its bars and legend)
SIDES: dict[str, Pair] = {"teacher": STATUS["ok"], "student": STATUS["info"]}


def palette_css(
    scope: str, palette: Mapping[str, Pair], classes: Mapping[str, str], prop: str = "color"
) -> str:
    """Each ``palette`` colour as ``prop`` of the class ``classes`` names it by, under ``scope``, with
    its dark twin under every host's dark selector (``prop="fill"`` for SVG text and shapes)."""
    light = "".join(f"{scope} .{classes[n]}{{{prop}:{palette[n][0]}}}" for n in classes)
    dark = "".join(
        f"{sel} {scope} .{classes[n]}{{{prop}:{palette[n][1]}}}" for sel in DARK_SELECTORS for n in classes
    )
    return light + dark


def status_css(scope: str, classes: Mapping[str, str] | None = None) -> str:
    """``.ok``/``.bad``/``.warn``/``.info`` under ``scope`` (or the class names ``classes`` gives each
    status), with their dark twins."""
    return palette_css(scope, STATUS, dict(classes) if classes is not None else {s: s for s in STATUS})


STATUS_STYLE = "<style>" + status_css("", {s: f"opd-{s}" for s in STATUS}) + "</style>"


def status_span(status: str, inner_html: str, *, styled: bool = True) -> str:
    """``inner_html`` in a status colour that follows the host's theme (its style travels with it, as
    a widget's HTML has no page style to lean on; ``styled=False`` where the caller put
    :data:`STATUS_STYLE` once before many spans)."""
    return f'{STATUS_STYLE if styled else ""}<span class="opd-{status}">{inner_html}</span>'


def inverted_in_dark(selector: str) -> str:
    """CSS that shows a light picture as a dark one under a dark host theme (hues kept)."""
    return "".join(f"{sel} {selector}{{filter:invert(1) hue-rotate(180deg)}}" for sel in DARK_SELECTORS)


def contrast(foreground: str, background: str) -> float:
    """The WCAG contrast ratio of two ``#rrggbb`` colours (1 to 21)."""

    def luminance(colour: str) -> float:
        channels = [int(colour[i : i + 2], 16) / 255 for i in (1, 3, 5)]
        lin = [c / 12.92 if c <= 0.04045 else ((c + 0.055) / 1.055) ** 2.4 for c in channels]
        return 0.2126 * lin[0] + 0.7152 * lin[1] + 0.0722 * lin[2]

    high, low = sorted((luminance(foreground), luminance(background)), reverse=True)
    return (high + 0.05) / (low + 0.05)
