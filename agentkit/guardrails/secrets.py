"""The secrets guardrail: API keys and tokens of the common providers, private keys, and
passwords written into URLs.

Each kind is one regular expression anchored on the token's fixed prefix (``sk-ant-``,
``ghp_``, ``AKIA``, ...), so a scan costs one pass per kind and nothing backtracks beyond a
bounded repetition: a megabyte of hostile text is read in milliseconds. Generic high-entropy
strings are not flagged (hashes, ids and base64 data would be refused all day); a key without
a recognisable prefix is caught only where it is labelled (``aws_secret_access_key = ...``) or
sent as a bearer token. ``benchmarks/bench_guardrails.py --secrets`` compares these patterns
with ``detect-secrets`` on the same samples.
"""

from __future__ import annotations

import re
from typing import Literal

from .base import Finding, PatternGuardrail, spans, trailing_run

_B = r"(?<![A-Za-z0-9_\-])"  # a token starts here: not inside a longer word
_E = r"(?![A-Za-z0-9_\-])"  # and ends here

_KINDS = [
    ("private_key", "private key",
     r"-----BEGIN[A-Z0-9 ]{0,40} PRIVATE KEY(?: BLOCK)?-----"
     r"(?:.*?-----END[A-Z0-9 ]{0,40} PRIVATE KEY(?: BLOCK)?-----|.*)"),
    ("anthropic_key", "Anthropic API key",
     _B + r"sk-ant-[a-z]{2,8}\d{2}-[A-Za-z0-9_\-]{20,}"),
    ("openai_key", "OpenAI-style API key",
     _B + r"sk-(?:proj-|svcacct-|admin-)?[A-Za-z0-9_\-]{20,}" + _E),
    ("stripe_key", "Stripe secret key", _B + r"(?:sk|rk)_(?:live|test)_[A-Za-z0-9]{16,}"),
    ("stripe_webhook", "Stripe webhook secret", _B + r"whsec_[A-Za-z0-9+/=]{24,}"),
    ("aws_access_key", "AWS access key id",
     _B + r"(?:AKIA|ASIA|ABIA|ACCA)[A-Z0-9]{16}" + _E),
    ("aws_secret_key", "AWS secret access key",
     r"(?i:aws_?secret(?:_?access)?_?key)[\"']?\s{0,4}[:=]\s{0,4}[\"']?"
     r"[A-Za-z0-9/+=]{40}(?![A-Za-z0-9/+=])"),
    ("github_token", "GitHub token",
     _B + r"(?:gh[pousr]_[A-Za-z0-9]{36,255}|github_pat_[A-Za-z0-9_]{22,255})"),
    ("gitlab_token", "GitLab token", _B + r"glpat-[A-Za-z0-9_\-]{20,}"),
    ("slack_token", "Slack token", _B + r"xox[abposr]-[A-Za-z0-9\-]{10,}"),
    ("slack_webhook", "Slack webhook URL",
     r"https://hooks\.slack\.com/services/[A-Za-z0-9_/]{20,}"),
    ("google_api_key", "Google API key", _B + r"AIza[0-9A-Za-z_\-]{35}" + _E),
    ("google_oauth_secret", "Google OAuth client secret", _B + r"GOCSPX-[A-Za-z0-9_\-]{28}"),
    ("huggingface_token", "Hugging Face token", _B + r"hf_[A-Za-z0-9]{30,}" + _E),
    ("sendgrid_key", "SendGrid API key",
     _B + r"SG\.[A-Za-z0-9_\-]{16,32}\.[A-Za-z0-9_\-]{16,64}"),
    ("npm_token", "npm token", _B + r"npm_[A-Za-z0-9]{36}" + _E),
    ("pypi_token", "PyPI token", _B + r"pypi-AgEIcHlwaS5vcmc[A-Za-z0-9_\-]{50,}"),
    ("digitalocean_token", "DigitalOcean token", _B + r"do[opr]_v1_[a-f0-9]{64}" + _E),
    ("twilio_key", "Twilio API key", _B + r"SK[0-9a-f]{32}" + _E),
    ("mailgun_key", "Mailgun API key", _B + r"key-[0-9a-f]{32}" + _E),
    ("telegram_token", "Telegram bot token",
     r"(?<![0-9])[0-9]{8,10}:AA[0-9A-Za-z_\-]{33}" + _E),
    ("jwt", "JSON web token",
     _B + r"eyJ[A-Za-z0-9_\-]{8,}\.eyJ[A-Za-z0-9_\-]{8,}\.[A-Za-z0-9_\-]{8,}"),
    ("bearer_token", "bearer token", r"(?i:\bbearer)[ \t]{1,4}[A-Za-z0-9\-._~+/]{20,}=*"),
    ("url_password", "password in a URL",
     r"\b[A-Za-z][A-Za-z0-9+.\-]{1,20}://[^\s:/?#@\"'<>\\]{1,128}:"
     r"(?P<secret>[^\s/?#@\"'<>\\]{1,128})@[A-Za-z0-9.\-\[\]]{1,255}"),
]  # fmt: skip

SECRET_PATTERNS: dict[str, tuple[str, re.Pattern[str]]] = {
    kind: (label, re.compile(pattern, re.S if kind == "private_key" else 0))
    for kind, label, pattern in _KINDS
}

_NEEDLES: dict[str, tuple[str, ...]] = {
    "private_key": ("PRIVATE KEY",),
    "anthropic_key": ("sk-ant-",),
    "openai_key": ("sk-",),
    "stripe_key": ("_live_", "_test_"),
    "stripe_webhook": ("whsec_",),
    "aws_access_key": ("AKIA", "ASIA", "ABIA", "ACCA"),
    "aws_secret_key": ("aws",),
    "github_token": ("ghp_", "gho_", "ghu_", "ghs_", "ghr_", "github_pat_"),
    "gitlab_token": ("glpat-",),
    "slack_token": ("xox",),
    "slack_webhook": ("hooks.slack.com",),
    "google_api_key": ("AIza",),
    "google_oauth_secret": ("GOCSPX-",),
    "huggingface_token": ("hf_",),
    "sendgrid_key": ("SG.",),
    "npm_token": ("npm_",),
    "pypi_token": ("pypi-",),
    "digitalocean_token": ("_v1_",),
    "twilio_key": ("SK",),
    "mailgun_key": ("key-",),
    "telegram_token": (":AA",),
    "jwt": ("eyJ",),
    "bearer_token": ("bearer",),
    "url_password": ("://",),
}
"""Text each kind cannot match without (``aws`` and ``bearer`` in any case): a scan runs a
kind's expression only where one of them is in the text, so ordinary text costs a few
substring searches."""
_ANY_CASE = frozenset({"aws_secret_key", "bearer_token"})
_NEEDLE_LIST = [
    (kind, needle, kind in _ANY_CASE) for kind, needles in _NEEDLES.items() for needle in needles
]


_PEM_BEGIN = "-----BEGIN"
_PEM_HOLD = 64 * 1024
"""The most of a streamed private key held while its end has not arrived."""
_TOKEN_HOLD = 512
"""The most of a streamed word held while it may still grow into a token."""


def _word(char: str) -> bool:
    return not char.isspace()


class Secrets(PatternGuardrail):
    """Refuses API keys and tokens of the common providers (OpenAI, Anthropic, AWS, GitHub,
    GitLab, Slack, Google, Stripe, Hugging Face, SendGrid, npm, PyPI, ...), private keys
    (PEM), JSON web tokens, bearer tokens and passwords in URLs.

    ``kinds`` keeps only some (see :data:`SECRET_PATTERNS`); ``action="redact"`` replaces each
    with ``[redacted: <what>]`` instead of ending the run."""

    name = "secrets"
    labels = {kind: label for kind, (label, _) in SECRET_PATTERNS.items()}

    def __init__(
        self,
        *,
        action: Literal["trip", "redact"] = "trip",
        kinds: list[str] | None = None,
        name: str | None = None,
        beside: bool = False,
    ) -> None:
        super().__init__(action=action, name=name, beside=beside)
        unknown = sorted(set(kinds or ()) - set(SECRET_PATTERNS))
        if unknown:
            raise ValueError(f"unknown secret kinds {unknown}; known: {sorted(SECRET_PATTERNS)}")
        chosen = kinds if kinds is not None else list(SECRET_PATTERNS)
        self._patterns = [(kind, SECRET_PATTERNS[kind][1]) for kind in chosen]

    def find(self, text: str) -> list[Finding]:
        """Every secret in ``text`` (see the class)."""
        found = []
        lowered = text.lower()
        possible = {
            kind for kind, needle, any_case in _NEEDLE_LIST
            if needle in (lowered if any_case else text)
        }  # fmt: skip
        for kind, pattern in self._patterns:
            if kind not in possible:
                continue
            for match in pattern.finditer(text):
                group = "secret" if "secret" in pattern.groupindex else 0
                found.append(Finding(match.start(group), match.end(group), kind))
        return spans(found)

    def hold(self, text: str) -> int:
        """Keep back the last word (it may be the start of a token) and, when redacting, a
        private key whose end has not arrived."""
        held = trailing_run(text, _word, _TOKEN_HOLD)
        begin = text.rfind(_PEM_BEGIN, max(len(text) - _PEM_HOLD, 0))
        if begin >= 0 and "-----END" not in text[begin:] and self.action == "redact":
            held = max(held, len(text) - begin)
        return held
