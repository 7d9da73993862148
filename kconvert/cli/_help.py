"""Help text at any width. kconvert's help goes through click's plain formatter (rich_markup_mode=None in
`kconvert.cli`): typer's rich panels cut long option names at 80 columns (`--min-acceptance…`). Click rewraps
prose paragraphs but would rewrap a command line too, so the examples are laid out here: each example one
paragraph click prints as written (`\\b`), a long one continued with ` \\` at an option, so that each line fits
and the whole still runs when pasted."""
from __future__ import annotations

WIDTH = 78  # click indents the epilog by 2


def _tokens(line: str) -> list[str]:
    """Split at spaces outside quotes (a --speculative-config JSON stays one token)."""
    out: list[str] = []
    cur = ""
    quote = ""
    for ch in line:
        if quote:
            cur += ch
            if ch == quote:
                quote = ""
        elif ch in "'\"":
            cur += ch
            quote = ch
        elif ch == " ":
            if cur:
                out.append(cur)
            cur = ""
        else:
            cur += ch
    if cur:
        out.append(cur)
    return out


def wrap_command(command: str, width: int = WIDTH, indent: str = "  ") -> list[str]:
    """One command as lines of at most `width` characters (a single token longer than that stands alone),
    continued with ` \\`, breaking before an option where it can."""
    toks = _tokens(command)
    lines: list[str] = []
    cur = indent + (toks[0] if toks else "")
    i = 1
    while i < len(toks):
        # keep an option with its value when both fit
        group = [toks[i]]
        if (toks[i].startswith("-") or toks[i] in (">", "|")) and i + 1 < len(toks) \
                and not toks[i + 1].startswith("-") and toks[i + 1] not in (">", "|"):
            group.append(toks[i + 1])
        piece = " ".join(group)
        if len(cur) + 1 + len(piece) + 2 <= width:
            cur += " " + piece
        else:
            lines.append(cur + " \\")
            cur = indent + "    " + piece
        i += len(group)
    lines.append(cur)
    return lines


def help_examples(text: str) -> str:
    """An EXAMPLES block ("Examples:" then commands separated by blank lines, ` \\` continuations allowed) as
    click's epilog: every command a verbatim paragraph that fits `WIDTH`."""
    head, *rest = [ln for ln in text.strip("\n").split("\n\n")]
    paragraphs = [head.strip()]
    for block in rest:
        command = " ".join(part.strip().rstrip("\\").strip() for part in block.strip("\n").split("\n"))
        if not command:
            continue
        paragraphs.append("\b\n" + "\n".join(wrap_command(command)))
    return "\n\n".join(paragraphs)
