"""The PII guardrail: e-mail addresses, phone numbers, payment card numbers (with their Luhn
check digit) and IBANs (with their mod-97 checksum and their country's length).

A candidate is found by a regular expression without nested repetition (linear on any input),
then kept only if it checks out: a card number must pass Luhn, an IBAN its checksum, a phone
number must have 8 to 15 digits with a ``+``, 10 to 15 without, and not be a date, an IP
address or a card number. What cannot be told from a number's shape alone (a 10-digit order
number written like a phone number) is refused: redaction is the forgiving way to use it.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Literal

from .base import Finding, PatternGuardrail, spans, trailing_run

IBAN_LENGTHS = {
    "AD": 24, "AE": 23, "AL": 28, "AT": 20, "AZ": 28, "BA": 20, "BE": 16, "BG": 22, "BH": 22,
    "BR": 29, "BY": 28, "CH": 21, "CR": 22, "CY": 28, "CZ": 24, "DE": 22, "DK": 18, "DO": 28,
    "EE": 20, "EG": 29, "ES": 24, "FI": 18, "FO": 18, "FR": 27, "GB": 22, "GE": 22, "GI": 23,
    "GL": 18, "GR": 27, "GT": 28, "HR": 21, "HU": 28, "IE": 22, "IL": 23, "IQ": 23, "IS": 26,
    "IT": 27, "JO": 30, "KW": 30, "KZ": 20, "LB": 28, "LC": 32, "LI": 21, "LT": 20, "LU": 20,
    "LV": 21, "MC": 27, "MD": 24, "ME": 22, "MK": 19, "MR": 27, "MT": 31, "MU": 30, "NL": 18,
    "NO": 15, "PK": 24, "PL": 28, "PS": 29, "PT": 25, "QA": 29, "RO": 24, "RS": 22, "SA": 24,
    "SC": 31, "SE": 24, "SI": 19, "SK": 24, "SM": 27, "ST": 25, "SV": 28, "TL": 23, "TN": 24,
    "TR": 26, "UA": 29, "VA": 22, "VG": 24, "XK": 20,
}  # fmt: skip
"""The IBAN length of each country that uses one (an unlisted country: 15 to 34)."""

_EMAIL = re.compile(
    r"(?<![\w.%+\-])[\w.%+\-]{1,64}@[\w\-]{1,63}"
    r"(?:\.[\w\-]{1,63}){0,8}\.[^\W\d_]{2,24}(?![\w\-])"
)
"""An address, in any script (``jöhn@exämple.de``); every repetition bounded."""
_CARD = re.compile(
    r"(?<![0-9])(?:[0-9]{13,19}|[0-9]{4}([ \-])[0-9]{4}\1[0-9]{4}\1[0-9]{1,7}"
    r"|[0-9]{4}([ \-])[0-9]{6}\2[0-9]{4,5})(?![0-9])"
)
_PHONE = re.compile(
    r"(?<![\w+])(?:\+[1-9][0-9]{7,14}"
    r"|(?:\+[1-9][0-9]{0,2}[ .\-]?)?(?:\([0-9]{1,4}\)[ .\-]?)?[0-9]{2,4}(?:[ .\-][0-9]{2,4}){1,5})"
    r"(?![\w])"
)
_IBAN = re.compile(
    r"(?<![A-Za-z0-9])[A-Za-z]{2}[0-9]{2}(?: ?[A-Za-z0-9]{4}){2,7}(?: ?[A-Za-z0-9]{1,4})?"
    r"(?![A-Za-z0-9])"
)
_DATE = re.compile(
    r"[0-9]{4}[.\-/ ][0-9]{1,2}[.\-/ ][0-9]{1,2}|[0-9]{1,2}[.\-/ ][0-9]{1,2}[.\-/ ][0-9]{4}"
)
_DIGIT = re.compile(r"[0-9]")
_IPV4 = re.compile(r"[0-9]{1,3}(?:\.[0-9]{1,3}){3}")

KINDS = ("email", "phone", "card", "iban")
LABELS = {"email": "email address", "phone": "phone number", "card": "card number", "iban": "IBAN"}


def luhn_valid(digits: str) -> bool:
    """Whether a string of digits passes the Luhn check (payment card numbers do)."""
    total = 0
    for position, char in enumerate(reversed(digits)):
        value = ord(char) - 48
        if position % 2:
            value = value * 2 - 9 if value > 4 else value * 2
        total += value
    return total % 10 == 0


def iban_valid(text: str) -> bool:
    """Whether ``text`` (spaces allowed, any case) is an IBAN: its country's length and a
    mod-97 checksum of 1."""
    iban = text.replace(" ", "").upper()
    expected = IBAN_LENGTHS.get(iban[:2])
    if (expected is not None and len(iban) != expected) or not 15 <= len(iban) <= 34:
        return False
    rearranged = iban[4:] + iban[:4]
    number = "".join(str(int(char, 36)) for char in rearranged)
    return int(number) % 97 == 1


def _card(text: str, match: re.Match[str]) -> bool:
    digits = re.sub(r"[ \-]", "", match.group())
    return 13 <= len(digits) <= 19 and len(set(digits)) > 1 and luhn_valid(digits)


def _phone(text: str, match: re.Match[str]) -> bool:
    found = match.group()
    digits = sum(char.isdigit() for char in found)
    if found.startswith("+"):
        return 8 <= digits <= 15
    if not 10 <= digits <= 15 or _IPV4.fullmatch(found) or _DATE.fullmatch(found):
        return False
    plain = re.sub(r"[ .\-]", "", found)
    return not (plain.isdigit() and 13 <= len(plain) <= 19 and luhn_valid(plain))


def _iban(text: str, match: re.Match[str]) -> bool:
    return iban_valid(match.group())


_DETECTORS: dict[str, tuple[re.Pattern[str], Callable[[str, re.Match[str]], bool] | None]] = {
    "email": (_EMAIL, None),
    "card": (_CARD, _card),
    "iban": (_IBAN, _iban),
    "phone": (_PHONE, _phone),
}


def _number_part(char: str) -> bool:
    return char.isdigit() or char in " -+().\u00a0" or ("A" <= char <= "Z")


class PII(PatternGuardrail):
    """Refuses personal data: e-mail addresses, phone numbers, payment card numbers (Luhn
    checked) and IBANs (checksummed). ``kinds`` keeps only some of ``"email"``, ``"phone"``,
    ``"card"`` and ``"iban"``; ``action="redact"`` replaces each with
    ``[redacted: <what>]`` instead of ending the run."""

    name = "pii"
    labels = LABELS

    def __init__(
        self,
        *,
        action: Literal["trip", "redact"] = "trip",
        kinds: list[str] | None = None,
        name: str | None = None,
        beside: bool = False,
    ) -> None:
        super().__init__(action=action, name=name, beside=beside)
        unknown = sorted(set(kinds or ()) - set(KINDS))
        if unknown:
            raise ValueError(f"unknown PII kinds {unknown}; known: {list(KINDS)}")
        chosen = set(kinds if kinds is not None else KINDS)
        self._detectors = [(kind, *found) for kind, found in _DETECTORS.items() if kind in chosen]

    def find(self, text: str) -> list[Finding]:
        """Every piece of personal data in ``text`` (see the class); a span two detectors
        claim goes to the first (an e-mail, a card, an IBAN, then a phone number)."""
        found = []
        digits = _DIGIT.search(text) is not None
        for kind, pattern, valid in self._detectors:
            if ("@" not in text) if kind == "email" else not digits:
                continue  # it cannot match without
            for match in pattern.finditer(text):
                if valid is None or valid(text, match):
                    found.append(Finding(match.start(), match.end(), kind))
        return spans(found)

    def hold(self, text: str) -> int:
        """Keep back the last word (an e-mail address may still grow) and a trailing run of
        digits, capitals and separators (a number written in groups)."""
        word = trailing_run(text, lambda char: not char.isspace(), 254)
        number = trailing_run(text, _number_part, 48)
        if not any(char.isdigit() for char in text[len(text) - number :]):
            number = 0
        return max(word, number)
