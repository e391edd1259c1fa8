"""Render exercise prompts from Markdown to HTML that is safe to insert into a page as-is.

Contract: ``render_markdown`` parses CommonMark (+ tables) with markdown-it-py and then sanitises the HTML
with nh3 against an allow-list: text formatting, headings, lists, code, tables, block quotes and links
(``http``/``https``/``mailto`` or relative, always ``rel="noopener noreferrer"``). Scripts, styles, forms,
images, iframes, event-handler attributes and ``javascript:`` URLs never survive. Prompts may contain raw
HTML; the sanitiser, not the author, decides what is kept.
"""

from __future__ import annotations

from functools import lru_cache

import nh3
from markdown_it import MarkdownIt

ALLOWED_TAGS = {
    "a", "abbr", "b", "blockquote", "br", "code", "dd", "del", "details", "div", "dl", "dt", "em",
    "h1", "h2", "h3", "h4", "h5", "h6", "hr", "i", "kbd", "li", "ol", "p", "pre", "s", "span",
    "strong", "sub", "summary", "sup", "table", "tbody", "td", "tfoot", "th", "thead", "tr", "ul",
}  # fmt: skip
ALLOWED_ATTRIBUTES = {
    "a": {"href", "title"},
    "abbr": {"title"},
    "code": {"class"},  # language-xyz from fenced code blocks
    "ol": {"start"},
    "td": {"style"},
    "th": {"style"},
}
URL_SCHEMES = {"http", "https", "mailto"}
# Dropped together with their content, not just unwrapped.
DROP_WITH_CONTENT = {"script", "style", "iframe", "object", "embed", "noscript", "template", "textarea", "select"}

_md = MarkdownIt("commonmark", {"html": True, "linkify": False}).enable("table")


@lru_cache(maxsize=512)
def render_markdown(text: str) -> str:
    """Return sanitised HTML for the Markdown ``text``."""
    return nh3.clean(
        _md.render(text),
        tags=ALLOWED_TAGS,
        clean_content_tags=DROP_WITH_CONTENT,
        attributes=ALLOWED_ATTRIBUTES,
        url_schemes=URL_SCHEMES,
        link_rel="noopener noreferrer",
        filter_style_properties={"text-align"},  # table column alignment, nothing else
        strip_comments=True,
    )
