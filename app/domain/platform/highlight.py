"""Syntax-highlight Python on the server with Pygments, so prompts and shown code are coloured without JavaScript.

Contract: ``highlight_python(code)`` and ``highlight_blocks(html)`` return markup that is safe to insert as-is:
Pygments escapes every character of the source and only adds ``<span class="…">`` around tokens (short
Pygments class names, coloured by ``app.css``). ``highlight_blocks`` rewrites only ``<pre><code
class="language-python">`` blocks of already-sanitised HTML
(from ``app.domain.platform.markdown``); other blocks are untouched.
"""

from __future__ import annotations

import html
import re

from markupsafe import Markup
from pygments import highlight
from pygments.formatters import HtmlFormatter
from pygments.lexers import PythonLexer

_FORMATTER = HtmlFormatter(nowrap=True)
_PY_BLOCK = re.compile(r'<pre><code class="language-(?:python|py|python3)">(.*?)</code></pre>', re.DOTALL)


def highlight_python(code: str) -> Markup:
    """Return ``code`` as escaped HTML with token spans (no surrounding ``pre``)."""
    # Pygments drops one trailing newline and adds its own; keep the text exactly as written otherwise.
    return Markup(highlight(code, PythonLexer(stripnl=False, ensurenl=False), _FORMATTER))  # noqa: S704


def highlight_blocks(sanitised_html: str) -> Markup:
    """Colour the Python code blocks of sanitised HTML."""

    def replace(match: re.Match[str]) -> str:
        source = html.unescape(match.group(1))
        return f'<pre class="code"><code class="language-python">{highlight_python(source)}</code></pre>'

    return Markup(_PY_BLOCK.sub(replace, sanitised_html))  # noqa: S704
