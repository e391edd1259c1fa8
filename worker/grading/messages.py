"""Make a test's failure message fit for a learner: no terminal codes, no harness traceback.

Contract: ``clean_message(text)`` returns the text with ANSI escape sequences and other control characters
removed (newlines and tabs kept), and every Python traceback in it folded into its exception's last line,
``ExcType: message``, followed by ``(your code, line N)`` when one of its frames is in the learner's file
(``submission.py``). Messages come from hidden tests that may quote an exception as the framework wrote it
(torch puts bold codes into its own messages), so the host cleans every message it stores, whatever the
runner did.

Hand-written rather than a library: the rules are a few regular expressions tied to what Python prints.
"""

from __future__ import annotations

import re

# CSI (ESC [ ... final byte) and OSC (ESC ] ... BEL or ESC \) sequences, then any other escape pair.
ANSI = re.compile(r"\x1b\[[0-?]*[ -/]*[@-~]|\x1b\][^\x07\x1b]*(?:\x07|\x1b\\)|\x1b[@-_]")
CONTROL = re.compile(r"[\x00-\x08\x0b-\x1f\x7f]")
TRACEBACK_HEAD = "Traceback (most recent call last):"
CHAINED = (
    "During handling of the above exception, another exception occurred:",
    "The above exception was the direct cause of the following exception:",
)
FRAME = re.compile(r'^\s+File "(?P<file>[^"]*)", line (?P<line>\d+)')
LEARNER_FILE = "submission.py"


def strip_terminal_codes(text: str) -> str:
    """Remove ANSI escape sequences and control characters other than newline and tab."""
    return CONTROL.sub("", ANSI.sub("", text.replace("\r\n", "\n")))


def _fold_tracebacks(lines: list[str]) -> list[str]:
    """Replace each traceback (with its chained causes) by its last exception line and the learner's line."""
    out: list[str] = []
    i = 0
    while i < len(lines):
        if lines[i].strip() != TRACEBACK_HEAD:
            out.append(lines[i])
            i += 1
            continue
        learner_line: str | None = None
        exception: list[str] = []
        while i < len(lines) and lines[i].strip() == TRACEBACK_HEAD:
            i += 1
            while i < len(lines) and (lines[i].startswith((" ", "\t")) or not lines[i].strip()):
                frame = FRAME.match(lines[i])
                if frame and frame["file"].replace("\\", "/").rsplit("/", 1)[-1] == LEARNER_FILE:
                    learner_line = frame["line"]
                i += 1
            exception = []
            while i < len(lines) and lines[i].strip() and lines[i].strip() != TRACEBACK_HEAD:
                exception.append(lines[i])
                i += 1
            # A chained exception: the one raised last, further down, is the one to show.
            j = i
            while j < len(lines) and not lines[j].strip():
                j += 1
            if j < len(lines) and lines[j].strip() in CHAINED:
                i = j + 1
                while i < len(lines) and not lines[i].strip():
                    i += 1
        # The line goes after the exception's first line: where its message ends cannot be told from the text.
        first, *rest = [line.strip() for line in exception] or ["an exception"]
        out.append(first + (f" (your code, line {learner_line})" if learner_line else ""))
        out.extend(rest)
    return out


def clean_message(text: str) -> str:
    """Return ``text`` without terminal codes and with tracebacks folded into ``ExcType: message``."""
    text = strip_terminal_codes(text)
    if TRACEBACK_HEAD in text:
        text = "\n".join(_fold_tracebacks(text.split("\n")))
    return text.strip()
