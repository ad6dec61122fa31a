"""The report's Chinese glyphs travel with it: a machine with no CJK font still reads it.

The glyphs come from Noto Sans SC (SIL Open Font License 1.1), which the dependency
`pylopdf-fonts-zh-cn` installs beside labctl (8 MB, the font alone; no font labctl could
find on the machine matters). The figures draw their text as paths from it (matplotlib's
`svg.fonttype: path`, DejaVu Sans first for Latin, then Noto Sans SC for what it lacks);
the page embeds the subset of it that its own text uses (a few hundred KB, an `@font-face`
of `data:`), which the browser takes for any character its own fonts lack.

Without the font (labctl installed without its dependencies) the report is as before: text
the browser draws with its own fonts, boxes where it has none; `labctl doctor` says so.
"""

from __future__ import annotations

import base64
import io
import re
from functools import cache
from importlib import resources
from pathlib import Path

FONT_PACKAGE = "pylopdf_fonts_zh_cn"
FONT_FILE = "NotoSansSC-Regular.otf"
FAMILY = "Noto Sans SC"  # the font's own family name, as matplotlib registers it
# The page's name for its embedded subset: never taken for a font of the machine's.
EMBEDDED = "labctl Noto Sans SC"
# Below this every character is Latin, Greek or a symbol DejaVu Sans and any browser draw.
_FIRST_WIDE = 0x2E80
# a pattern, not a loop over the characters: the page it reads holds megabytes of SVG
_WIDE = re.compile(f"[{chr(_FIRST_WIDE)}-{chr(0x10FFFF)}]")


@cache
def font_path() -> Path | None:
    """The installed Noto Sans SC, or None."""
    try:
        path = Path(str(resources.files(FONT_PACKAGE).joinpath(FONT_FILE)))
    except (ModuleNotFoundError, TypeError):
        return None
    return path if path.is_file() else None


def wide_characters(text: str) -> str:
    """The CJK characters (ideographs, their punctuation, full-width forms) `text` holds,
    each once, sorted."""
    return "".join(sorted(set(_WIDE.findall(text))))


def font_face(text: str) -> str:
    """An `@font-face` rule embedding the subset of the font that `text`'s CJK characters
    need, or "" when it needs none or the font is not installed."""
    needed = wide_characters(text)
    path = font_path()
    if not needed or path is None:
        return ""
    data = base64.b64encode(_subset(path, needed)).decode("ascii")
    return (
        f'@font-face {{ font-family: "{EMBEDDED}"; '
        f'src: url(data:font/otf;base64,{data}) format("opentype"); }}'
    )


def _subset(path: Path, characters: str) -> bytes:
    from fontTools import subset  # matplotlib's own dependency
    from fontTools.ttLib import TTFont

    options = subset.Options()
    options.notdef_outline = True
    # the subset keeps the font's own modification time: the same text, the same bytes
    font = TTFont(str(path), lazy=True, recalcTimestamp=False)
    subsetter = subset.Subsetter(options)
    subsetter.populate(text=characters)
    subsetter.subset(font)
    out = io.BytesIO()
    font.save(out)
    return out.getvalue()


def matplotlib_families() -> list[str]:
    """The font families the figures draw with, the CJK one registered with matplotlib
    first (once per process)."""
    path = font_path()
    if path is None:
        return ["DejaVu Sans"]
    _register(str(path))
    return ["DejaVu Sans", FAMILY]


@cache
def _register(path: str) -> None:
    from matplotlib import font_manager

    font_manager.fontManager.addfont(path)
