"""The skeleton of grading's HTML pages (the class page, the similarity report): one
self-contained document in the run's language, with the report's style and its
Content-Security-Policy (no script, nothing fetched), and learner text made inert."""

from __future__ import annotations

import html

from labctl.i18n import language
from labctl.report.html import CSP, CSS
from labctl.textsafe import shown


def escaped(text: object) -> str:
    """Learner text as inert HTML: control and bidi characters shown escaped, then escaped."""
    return html.escape(shown(str(text)), quote=True)


def page(title: str, style: str, body: str) -> str:
    """The page: `title` as its title and heading, `style` after the report's, then `body`."""
    return f"""<!DOCTYPE html>
<html lang="{language()}">
<head>
<meta charset="utf-8">
<meta http-equiv="Content-Security-Policy" content="{CSP}">
<title>{escaped(title)}</title>
<style>{CSS}{style}</style>
</head>
<body>
<h1>{escaped(title)}</h1>
{body}
</body>
</html>
"""
