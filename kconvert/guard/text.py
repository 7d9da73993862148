"""Text on its way out: one escape for every output format (issue #45, SECURITY.md "Text kconvert prints").

Every string kconvert did not write itself (a config value, a tensor or file name, a path, an argument, a Hub id,
an engine's log line) may hold characters that act instead of being shown: ESC starts a terminal sequence (an OSC 0
retitles the terminal, a CSI moves the cursor or clears the screen), BEL rings, CR and LF forge or split a CI log's
line, a C1 control (U+009B is CSI on its own) does what ESC does on many terminals, a lone surrogate has no UTF-8
form at all and U+FFFE/U+FFFF and the C0 controls are not XML 1.0 characters (a JUnit parser refuses the file).
`visible` shows each of them as a stable, readable escape instead, so the text stays one line, reads the same on a
terminal, in a CI log and in a parser, and can be searched for.

`visible_document` applies it to every string of a document (keys too) at the one boundary between a command's
result and a renderer (`kconvert.report.formats.render`, the full view and the JSON printers of
`kconvert.cli._output`), so a renderer never sees raw text and cannot forget to escape it.

Markup is the renderer's own business: rich's `[bold]`, Markdown's `|`, HTML's `<` are escaped (or never parsed)
where each renderer builds its output, since only the renderer knows its syntax.
"""
from __future__ import annotations

import math
import re
import unicodedata
from typing import Any

# Unicode general categories shown as escapes: Cc (C0, DEL, C1: ESC, BEL, CR, LF, TAB, CSI U+009B, OSC U+009D,
# NEL U+0085), Cs (lone surrogates: no UTF-8 form, not XML, refused by serde_json), Cf (format characters: the
# bidirectional overrides and isolates that reorder what a reader sees, CVE-2021-42574 "Trojan Source", zero-width
# characters that hide text, the BOM), Zl and Zp (U+2028 and U+2029, where str.splitlines and JavaScript break a
# line).
_CATEGORIES = frozenset({"Cc", "Cs", "Cf", "Zl", "Zp"})
# The two noncharacters XML 1.0 excludes from its Char production (https://www.w3.org/TR/xml/#charsets:
# #x20-#xD7FF | #xE000-#xFFFD | #x10000-#x10FFFF, besides TAB, LF and CR, which are Cc above).
_NOT_XML = frozenset({"\ufffe", "\uffff"})
# A fast path: str.isprintable() is True for most text and False for every character above (and for some
# harmless ones, such as a no-break space, which the slow path then keeps).
_ASCII_PRINTABLE = re.compile(r"[ -~]*", re.ASCII)


def needs_escape(ch: str) -> bool:
    """Whether one character is shown as an escape by `visible`."""
    return ch in _NOT_XML or unicodedata.category(ch) in _CATEGORIES


_SHORT = {"\t": "\\t", "\n": "\\n", "\r": "\\r"}


def _escape(ch: str) -> str:
    c = ord(ch)
    if ch in _SHORT:
        return _SHORT[ch]
    if c < 0x80:
        return f"\\x{c:02x}"  # C0 and DEL as Python writes them: \x1b, \x07, \x7f
    if c <= 0xFFFF:
        return f"\\u{c:04x}"  # C1, surrogates, format characters: \u009b, \ud800, \u202e
    return f"\\U{c:08x}"


def visible(text: str) -> str:
    """`text` with every character that would act on a terminal, a log or a parser shown as an escape (`\\x1b`,
    `\\u009b`, `\\ud800`); everything else, non-ASCII letters and emoji included, as it is. Backslashes are kept
    as they are: the result is for reading, not for decoding back."""
    if _ASCII_PRINTABLE.fullmatch(text) or (text.isprintable() and not any(ch in _NOT_XML for ch in text)):
        return text
    return "".join(_escape(ch) if needs_escape(ch) else ch for ch in text)


def visible_lines(text: str) -> str:
    """Several lines (a model card, a diff) each made `visible`, the line feeds between them kept."""
    return "\n".join(visible(line) for line in text.split("\n"))


_CONTROL = re.compile("[\x00-\x1f\x7f-\x9f]")  # Unicode's Cc, all of it: C0, DEL, C1


def has_control(text: str) -> bool:
    """Whether `text` holds a control character (Unicode category Cc: C0, DEL and C1), which names (tensor, file,
    index path) may not hold (SECURITY.md): the C1 ones act on terminals as the C0 ones do (U+009B is CSI)."""
    return _CONTROL.search(text) is not None


def visible_document(obj: Any) -> Any:
    """A copy of a document (dicts, lists, tuples, strings, numbers) as it may leave kconvert: `visible` applied to
    every string, keys included, and a non-finite float (NaN, an infinity) as None, since strict JSON (RFC 8259),
    which kconvert reads and writes, has no such number (issue #45: "no NaN/Infinity in, none out"); anything else
    is returned as it is."""
    if isinstance(obj, str):
        return visible(obj)
    if isinstance(obj, float) and not math.isfinite(obj):
        return None
    if isinstance(obj, dict):
        return {visible_document(k): visible_document(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [visible_document(v) for v in obj]  # a JSON array either way
    return obj


__all__ = ["has_control", "needs_escape", "visible", "visible_document", "visible_lines"]
