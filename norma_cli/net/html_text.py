"""Readable text from HTML and from response bytes (stdlib only).

``html_to_text`` keeps what a reader needs: headings as ``#`` lines, paragraphs and list
items on their own lines, links as ``[text](url)`` (resolved against the page URL), ``pre``
blocks verbatim, table rows with cells separated by `` | ``. Scripts, styles, templates,
``noscript``, SVG and forms' hidden parts are dropped, and whitespace is collapsed.

``decode`` picks the charset: a byte-order mark, then the Content-Type ``charset``, then (for
HTML) a ``<meta charset>`` / ``http-equiv`` declaration in the first 4 KB, then UTF-8 — with
undecodable bytes replaced, never an exception. A declared name is used only if it is a text
encoding: ``codecs.lookup`` also knows bytes-to-bytes codecs (``zlib``, ``base64``), ``rot13``
and special ones (``undefined``, ``idna``) that cannot decode a page.

The conversion is linear in the page's size, so a hostile page within the byte cap cannot
stall it: no step re-joins text already emitted (see ``_Text._newline`` and ``<a>``).
"""

from __future__ import annotations

import codecs
import re
from html.parser import HTMLParser
from urllib.parse import urljoin

_SKIP = {"script", "style", "template", "noscript", "svg", "head", "iframe", "object", "canvas"}
_BLOCK = {
    "p",
    "div",
    "section",
    "article",
    "main",
    "header",
    "footer",
    "nav",
    "aside",
    "ul",
    "ol",
    "li",
    "dl",
    "dt",
    "dd",
    "table",
    "tr",
    "blockquote",
    "figure",
    "figcaption",
    "form",
    "fieldset",
    "details",
    "summary",
    "address",
    "hr",
    "br",
    "pre",
    "h1",
    "h2",
    "h3",
    "h4",
    "h5",
    "h6",
    "title",
    "body",
    "html",
    "caption",
    "thead",
    "tbody",
    "tfoot",
}
_VOID = {
    "br",
    "hr",
    "img",
    "input",
    "meta",
    "link",
    "area",
    "base",
    "col",
    "embed",
    "source",
    "wbr",
}
_META_CHARSET = re.compile(
    rb"""<meta[^>]+?charset\s*=\s*["']?\s*([A-Za-z0-9._:\-]+)""", re.IGNORECASE
)


def decode(body: bytes, content_type: str, *, html: bool) -> tuple[str, str]:
    """The text of a body and the charset used to decode it."""
    for bom, name in (
        (codecs.BOM_UTF8, "utf-8-sig"),
        (codecs.BOM_UTF16_LE, "utf-16"),
        (codecs.BOM_UTF16_BE, "utf-16"),
    ):
        if body.startswith(bom):
            return body.decode(name, "replace"), name
    candidates: list[str | None] = [_param(content_type, "charset")]
    if html:
        m = _META_CHARSET.search(body[:4096])
        candidates.append(m.group(1).decode("ascii", "replace") if m else None)
    for candidate in candidates:
        if not candidate:
            continue
        try:
            codec = codecs.lookup(candidate.strip().strip("\"'"))
            # ``_is_text_encoding`` is how the stdlib itself (str.encode, bytes.decode) tells
            # text encodings from the others; it is False for zlib, base64, rot13 and the like.
            if not getattr(codec, "_is_text_encoding", True):
                continue
            return codec.decode(body, "replace")[0], codec.name
        except (LookupError, UnicodeError):  # unknown, or a codec that refuses "replace"
            continue
    return body.decode("utf-8", "replace"), "utf-8"


def _param(content_type: str, key: str) -> str | None:
    for part in content_type.split(";")[1:]:
        name, _, value = part.partition("=")
        if name.strip().lower() == key:
            return value.strip().strip("\"'") or None
    return None


def is_html(content_type: str, body: bytes) -> bool:
    mime = content_type.split(";", 1)[0].strip().lower()
    if mime in ("text/html", "application/xhtml+xml"):
        return True
    if mime:
        return False
    head = body[:512].lstrip().lower()
    return head.startswith((b"<!doctype html", b"<html"))


def is_text(content_type: str) -> bool:
    mime = content_type.split(";", 1)[0].strip().lower()
    return (
        not mime
        or mime.startswith("text/")
        or mime.endswith(("+json", "+xml"))
        or mime
        in (
            "application/json",
            "application/xml",
            "application/javascript",
            "application/x-javascript",
            "application/ecmascript",
            "application/x-ndjson",
            "application/yaml",
            "application/x-yaml",
            "application/toml",
            "application/x-sh",
            "application/sql",
            "application/graphql",
        )
    )


class _Text(HTMLParser):
    def __init__(self, base_url: str) -> None:
        super().__init__(convert_charrefs=True)
        self.base_url = base_url
        self.out: list[str] = []
        self.skip = 0
        self.pre = 0
        self.title: list[str] = []
        self.in_title = False
        self.links: list[tuple[str | None, int]] = []  # (href, position in out) of open <a>
        self.cells = 0

    # -- structure
    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        if tag == "title":
            self.in_title = True
            return
        if tag in _SKIP:
            if tag not in _VOID:
                self.skip += 1
            return
        if self.skip:
            return
        if tag in _BLOCK:
            self._newline(
                2 if tag in ("p", "h1", "h2", "h3", "h4", "h5", "h6", "pre", "table") else 1
            )
        if tag in ("h1", "h2", "h3", "h4", "h5", "h6"):
            self.out.append("#" * int(tag[1]) + " ")
        elif tag == "li":
            self.out.append("- ")
        elif tag == "pre":
            self.pre += 1
        elif tag == "tr":
            self.cells = 0
        elif tag in ("td", "th"):
            if self.cells:
                self.out.append(" | ")
            self.cells += 1
        elif tag == "a":
            # <a> cannot nest: a new one closes the open one, as browsers do. It also keeps
            # each piece of text inside at most one link, so rewriting links stays linear.
            if self.links:
                self._close_link()
            self.links.append((dict(attrs).get("href"), len(self.out)))
        elif tag == "img":
            alt = (dict(attrs).get("alt") or "").strip()
            if alt:
                self.out.append(f"[image: {alt}]")

    def handle_endtag(self, tag: str) -> None:
        if tag == "title":
            self.in_title = False
            return
        if tag in _SKIP:
            if tag not in _VOID and self.skip:
                self.skip -= 1
            return
        if self.skip:
            return
        if tag == "a" and self.links:
            self._close_link()
        elif tag == "pre" and self.pre:
            self.pre -= 1
        if tag in _BLOCK:
            self._newline(
                2 if tag in ("p", "h1", "h2", "h3", "h4", "h5", "h6", "pre", "table") else 1
            )

    def handle_startendtag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.handle_starttag(tag, attrs)
        if tag not in _VOID:
            self.handle_endtag(tag)

    def handle_data(self, data: str) -> None:
        if self.in_title:
            self.title.append(data)
            return
        if self.skip:
            return
        if self.pre:
            self.out.append(data)
            return
        text = re.sub(r"\s+", " ", data)
        if not self.out or self.out[-1].endswith("\n"):
            text = text.lstrip(" ")  # no indentation from the markup's own line breaks
        if text:
            self.out.append(text)

    def _close_link(self) -> None:
        """Rewrite the open link's text as ``[text](url)``."""
        href, start = self.links.pop()
        text = "".join(self.out[start:]).strip()
        if (
            href
            and text
            and not href.lower().startswith(("javascript:", "data:"))
            and not href.startswith("#")
        ):
            self.out[start:] = [f"[{text}]({urljoin(self.base_url, href)})"]

    def _newline(self, n: int) -> None:
        """End the current line and leave ``n - 1`` blank lines (without stacking them)."""
        if not self.out:
            return
        # Count the newlines already at the end (at most n), char by char from the last piece
        # back: joining or stripping the last pieces would copy a long text piece on every
        # block tag after it, which made a page of text then <br>s quadratic.
        have = 0
        for piece in reversed(self.out[-4:]):
            i = len(piece)
            while i and piece[i - 1] == "\n" and have < n:
                i -= 1
                have += 1
            if i or have >= n:  # text before the newlines, or enough of them
                break
        if have < n:
            self.out.append("\n" * (n - have))

    def text(self) -> str:
        raw = "".join(self.out)
        text = "\n".join(line.rstrip() for line in raw.split("\n"))
        text = re.sub(r"\n{3,}", "\n\n", text).strip("\n")
        title = re.sub(r"\s+", " ", "".join(self.title)).strip()
        return f"# {title}\n\n{text}" if title and not text.startswith(f"# {title}") else text


def html_to_text(html: str, base_url: str = "") -> str:
    parser = _Text(base_url)
    try:
        parser.feed(html)
        parser.close()
    except (AssertionError, ValueError):  # malformed markup the parser gives up on
        pass
    return parser.text()


__all__ = ["decode", "html_to_text", "is_html", "is_text"]
