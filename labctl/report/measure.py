"""The figures' text measured once per `labctl report`, not once per figure and pass.

matplotlib keeps what it measures of a text per renderer, and a figure has two SVG renderers,
its constrained layout's and its save's: every tick label, cell value ("0.50") and title of
the report's ~65 figures was measured again for each figure and pass, by converting it to
glyph outlines, and before each measurement its font was looked up again (two families,
each through the font manager, and the font's tables read) for its line height: about a
quarter of the figures' drawing time.

Neither depends on the renderer. An SVG renderer measures text through matplotlib's
`TextToPath` at one fixed scale, whatever the figure, and draws its figure at 72 dpi
(`print_svg` sets it), so the same string in the same font measures the same in every
figure. Both are kept here for the process, keyed by what decides them (the string, the
font's properties): the figures' bytes are the same, drawn in less time.
"""

from __future__ import annotations

from functools import cache, wraps

# What an SVG renderer's figure is drawn at: `FigureCanvasSVG.print_svg` sets it.
SVG_DPI = 72


@cache
def install() -> None:
    """Make every SVG renderer of this process share its text's measurements (once)."""
    from matplotlib.backends.backend_svg import RendererSVG

    measure = RendererSVG.get_text_width_height_descent
    sizes: dict = {}

    @wraps(measure)
    def get_text_width_height_descent(self, s, prop, ismath):
        if ismath:  # mathtext and TeX depend on settings a key would have to hold; none here
            return measure(self, s, prop, ismath)
        # a copy: FontProperties is mutable, and its hash is its current value
        key = (s, prop.copy())
        if key not in sizes:
            sizes[key] = measure(self, s, prop, ismath)
        return sizes[key]

    RendererSVG.get_text_width_height_descent = get_text_width_height_descent
    # `Text._get_layout` asks a renderer that has this method for a font's line metrics
    # instead of looking the font up for each text it lays out.
    RendererSVG._get_font_height_metrics = _line_metrics


def _line_metrics(_renderer, prop) -> tuple[float, float, float] | tuple[None, None, None]:
    """The ascent, descent and line gap of `prop`'s font in pixels of an SVG figure, as
    `Text._get_layout` computes them where a renderer does not give them (matplotlib 3.11),
    operation for operation: the same floats."""
    return _line_metrics_of(prop.copy())


@cache
def _line_metrics_of(prop) -> tuple[float, float, float] | tuple[None, None, None]:
    from matplotlib.font_manager import fontManager, get_font

    font = get_font(fontManager._find_fonts_by_props(prop))
    for table_name, gap_key, ascent_key, descent_key in (
        ("OS/2", "sTypoLineGap", "sTypoAscender", "sTypoDescender"),
        ("hhea", "lineGap", "ascent", "descent"),
    ):
        table = font.get_sfnt_table(table_name)
        if table is None:
            continue
        scale = 1 / font.get_sfnt_table("head")["unitsPerEm"] * prop.get_size_in_points()
        scale = scale * SVG_DPI / 72
        return table[ascent_key] * scale, -table[descent_key] * scale, table[gap_key] * scale
    return None, None, None  # matplotlib then measures "lp" for them
