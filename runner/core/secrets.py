"""Keys never leave the process: every secret the run holds is registered here, and the few
places bytes leave for a file or a stream (whole-file writes, record lines, the response
cache, stdout and stderr) pass their text through `redact()`. A secret is also caught in the
forms a server or a proxy may echo it in: URL-encoded, and base64 at any alignment (as in a
Basic `Authorization` header or a dumped request)."""

from __future__ import annotations

import base64
import math
import sys
from typing import TextIO
from urllib.parse import quote, quote_plus

REDACTED = "[redacted]"
# Where each provider's key comes from (the providers read them; the CLI redacts them).
KEY_VARIABLES = {"openai": "OPENAI_API_KEY", "anthropic": "ANTHROPIC_API_KEY", "gemini": "GEMINI_API_KEY"}
MIN_SECRET = 8  # shorter values are not keys, and replacing them would mangle ordinary text
_forms: set[str] = set()


def _base64_forms(secret: bytes) -> set[str]:
    """The part of base64(prefix + secret + suffix) that depends on the secret alone, for
    each of the three alignments a secret can have inside a longer encoded text."""
    out = set()
    for shift in range(3):
        for encode in (base64.b64encode, base64.urlsafe_b64encode):
            text = encode(b"\0" * shift + secret).decode().rstrip("=")
            start = math.ceil(shift * 8 / 6)
            stop = (shift + len(secret)) * 8 // 6
            middle = text[start:stop]
            if len(middle) >= MIN_SECRET:
                out.add(middle)
    return out


def register(secret: str | None) -> None:
    """Remember a secret (an API key) and the forms it may be echoed in."""
    if not secret or len(secret.strip()) < MIN_SECRET:
        return
    secret = secret.strip()
    _forms.update({secret, quote(secret, safe=""), quote_plus(secret)} | _base64_forms(secret.encode()))


def redact(text: str) -> str:
    """`text` with every registered secret, in every form, replaced."""
    for form in sorted(_forms, key=len, reverse=True):  # longest first: no form is left half-replaced
        if form in text:
            text = text.replace(form, REDACTED)
    return text


class RedactingStream:
    """A text stream that redacts what is written to it (stdout and stderr of the CLI)."""

    def __init__(self, stream: TextIO):
        self._stream = stream

    def write(self, text: str) -> int:
        self._stream.write(redact(text))
        return len(text)

    def __getattr__(self, name: str):
        return getattr(self._stream, name)


def redact_standard_streams() -> None:
    if not isinstance(sys.stdout, RedactingStream):
        sys.stdout = RedactingStream(sys.stdout)
    if not isinstance(sys.stderr, RedactingStream):
        sys.stderr = RedactingStream(sys.stderr)
