"""Who may use the service: the bearer token every route but /health and /livez asks for.

The one check lives here so "where is auth?" has a file for an answer. The token is compared in
constant time (``hmac.compare_digest``: docs.python.org/3/library/hmac.html, "to prevent timing
analysis"), so a client cannot learn it a byte at a time from how long a refusal takes; the scheme
name is case-insensitive (RFC 9110 section 11.1, "Authentication Scheme"); a refusal says
whether a token was sent at all, never which part was wrong, and carries ``WWW-Authenticate: Bearer``
(RFC 6750 section 3). The token itself is read from its file at start (config.py names it) and
never logged.
"""

from __future__ import annotations

import hmac

#: the refusal: status, OpenAI's error type and string code, and the header RFC 6750 asks for
REFUSED_STATUS = 401
REFUSED_KIND = "authentication_error"
REFUSED_CODE = "invalid_api_key"
REFUSED_HEADERS = {"WWW-Authenticate": "Bearer"}


def refusal(header: str | None, token: str) -> str | None:
    """None when the ``Authorization`` header ``header`` carries the bearer ``token``, else the message
    the 401 answers with."""
    got = header or ""
    scheme, _, value = got.partition(" ")
    if scheme.lower() == "bearer" and hmac.compare_digest(value.strip().encode(), token.encode()):
        return None
    return "missing or wrong bearer token" if got else "Authorization: Bearer <token> required"
