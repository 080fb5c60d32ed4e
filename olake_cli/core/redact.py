"""Secrets out of text before it is shown: removed where they occur as values, never inside other words.

A secret is replaced by ``***`` where it is a value: the password of a URI (``scheme://user:***@``),
the value of a secret-named option (``password=***``, ``"token": "***"``, ``'secret': '***'``), or,
for each known secret (raw or percent-encoded), an occurrence that stands as a whole token, not as
part of a longer word, host name or number (a password ``x`` leaves ``nonexistent.invalid`` alone).
A secret equal to a value shown on purpose (``keep``: the user name, the host) is removed only
where it stands as a value, so that the user name still reads as the user name.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from urllib.parse import quote

MASK = "***"
SECRET_NAME = re.compile(r"password|passwd|pwd|secret|token|credential|(?:private|api|account|access|session)[_-]?key",
                         re.IGNORECASE)
_URI_PASSWORD = re.compile(r"(?P<head>\b[a-z][a-z0-9+.-]*://[^\s:/?#@]*:)[^\s/?#@]*@", re.IGNORECASE)
_VALUE = r"""(?P<value>"(?:[^"\\]|\\.)*"|'(?:[^'\\]|\\.)*'|[^\s&;,'"(){}\[\]<>]+)"""
_NAME = r"[\w.-]*(?:" + SECRET_NAME.pattern + r")[\w.-]*"
_OPTION = re.compile(r"(?P<head>(?<![\w.-])" + _NAME + r"\s*=\s*)" + _VALUE, re.IGNORECASE)
_QUOTED_KEY = re.compile(r"""(?P<head>(?P<q>["'])""" + _NAME + r"""(?P=q)\s*:\s*)""" + _VALUE, re.IGNORECASE)
_BEFORE_TOKEN = r"(?<![\w-])(?<!\w\.)"  # not inside a word, a hyphenated word or a dotted name
_AFTER_TOKEN = r"(?![\w-])(?!\.\w)"


def remove_secrets(text: str, secrets: Iterable[str | None] = (), keep: Iterable[str | None] = ()) -> str:
    """``text`` with URI passwords, secret-named option values and each of ``secrets`` (where it
    stands as a whole token, raw or percent-encoded) replaced by ``***``; a secret equal to one of
    ``keep`` (values printed on purpose) only where it is a value."""
    text = _URI_PASSWORD.sub(lambda m: m["head"] + MASK + "@", text)
    text = _OPTION.sub(_masked_value, text)
    text = _QUOTED_KEY.sub(_masked_value, text)
    shown = {value for value in keep if value}
    for secret in _token_forms(secrets):
        if secret not in shown:
            text = re.sub(_BEFORE_TOKEN + re.escape(secret) + _AFTER_TOKEN, MASK, text)
    return text


def is_secret_name(name: str) -> bool:
    """Whether a setting's name says its value is a secret (``password``, ``s3.secret-access-key``, ...)."""
    return SECRET_NAME.search(name) is not None


def _masked_value(match: re.Match[str]) -> str:
    """An option with its value masked, keeping the value's quotes."""
    value = match["value"]
    quote_char = value[0] if value[:1] in ("'", '"') else ""
    return f"{match['head']}{quote_char}{MASK}{quote_char}"


def _token_forms(secrets: Iterable[str | None]) -> list[str]:
    """Each secret raw and percent-encoded, longest first (a longer form is replaced before its parts)."""
    forms = {form for secret in secrets if secret for form in (secret, quote(secret, safe=""))}
    return sorted(forms, key=len, reverse=True)
