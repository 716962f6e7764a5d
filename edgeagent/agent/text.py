"""The one rule for text the agent accepts from outside (its HTTP API, its command line): valid Unicode.

JSON can spell a lone UTF-16 surrogate (`"\\ud800"`), and a command-line argument that is not UTF-8 reaches
Python as such surrogates too (`$'\\xff\\xfe'`, decoded with `surrogateescape`). Neither can be encoded as
UTF-8, so they fail later, far from their cause: in the state store, in a text answer that echoes them, in a
log line. They are refused where they arrive, naming the field.
"""

from __future__ import annotations

_ESCAPED_BYTES = range(0xDC80, 0xDD00)  # what surrogateescape makes of the bytes 0x80..0xff that are not UTF-8


def text_problem(field: str, value: str) -> str | None:
    """Why `value`, given for `field`, is not acceptable text, in one line; None when it is."""
    try:
        value.encode("utf-8")
    except UnicodeEncodeError as exc:
        char = ord(value[exc.start])
        if char in _ESCAPED_BYTES:
            what = f"the byte 0x{char - 0xDC00:02x}, which is not UTF-8"
        else:
            what = f"U+{char:04X}, a lone surrogate"
        return f"{field} is not valid Unicode text: character {exc.start + 1} is {what}"
    return None


__all__ = ["text_problem"]
