"""The built-in detectors on their own: each kind of secret and personal data found, ordinary
text left alone, redaction in place, and hostile input (a megabyte, unicode, strings made to
make a regular expression backtrack) read in bounded time."""

from __future__ import annotations

import json
import time

import pytest

from agentkit.abort import AbortController
from agentkit.guardrails import (
    PII,
    SECRET_PATTERNS,
    Check,
    Finding,
    MaxLength,
    Pattern,
    PatternGuardrail,
    Secrets,
    iban_valid,
    luhn_valid,
)

A = "abcdefghijklmnopqrstuvwxyz"
D = "0123456789"

# Fake tokens in each provider's shape (built from pieces so that no scanner takes the file for
# a leak).
SECRETS = {
    "private_key": "-----BEGIN RSA PRIVATE KEY-----\nMIIEpAIBAAKCAQEA7x\n-----END RSA PRIVATE KEY-----",
    "anthropic_key": "sk-ant-" + "api03-" + "Xy9" * 30,
    "openai_key": "sk-" + "proj-" + "Ab3Cd5Ef7Gh9" * 4,
    "stripe_key": "sk_" + "live_" + "4eC39HqLyjWDarjtT1zdp7dc",
    "stripe_webhook": "whsec_" + "MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw",
    "aws_access_key": "AKIA" + "IOSFODNN7EXAMPLE",
    "aws_secret_key": "aws_secret_access_key = " + "wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY",
    "github_token": "ghp_" + "1234567890abcdefghijABCDEFGHIJ123456",
    "gitlab_token": "glpat-" + "xxxxXXXXxxxxXXXXxxxx",
    "slack_token": "xoxb-" + "123456789012-abcdefABCDEF",
    "slack_webhook": "https://hooks.slack.com/services/" + "T00000000/B00000000/XXXXXXXXXXXXXXXX",
    "google_api_key": "AIza" + "SyA1234567890abcdefghijklmnopqrstuv",
    "google_oauth_secret": "GOCSPX-" + "abcdefghijklmnopqrstuvwxyz12",
    "huggingface_token": "hf_" + "abcdefghijklmnopqrstuvwxyzABCDEFGH",
    "sendgrid_key": "SG." + "ngeVfQFYQlKU0ufo8x5d1A" + "." + "TwL2iGABf9DHoTf-09kqeF8tAmbihYzrnopKc-1s5cr",
    "npm_token": "npm_" + "abcdefghijklmnopqrstuvwxyz0123456789",
    "pypi_token": "pypi-AgEIcHlwaS5vcmc" + "CJDQ1ZmY2YzgtMmQ0Ny00YWVmLWJkMjMtNTk3OWQ3YjJmZjBkAAIqWzMsImNl",
    "digitalocean_token": "dop_v1_" + "a" * 64,
    "twilio_key": "SK" + "0123456789abcdef" * 2,
    "mailgun_key": "key-" + "0123456789abcdef" * 2,
    "telegram_token": "123456789:" + "AAHdqTcvCH1vGWJxfSeofSAs0K5PALDsaw5",
    "jwt": "eyJhbGciOiJIUzI1NiJ9" + ".eyJzdWIiOiIxMjM0NTY3ODkwIn0" + ".dozjgNryP4J3jVmNHl0w5N_XgL0n3I9PlFUP0THsR8U",
    "bearer_token": "Authorization: Bearer " + "abcdefghijklmnopqrstuvwxyz0123456789",
    "url_password": "postgres://admin:" + "hunter2hunter2" + "@db.internal:5432/app",
}  # fmt: skip

ORDINARY = [
    "The risk-assessment was done by ask-me-anything on the task-list.",
    "commit 3f786850e387550fdab836ed7e6dc881de23001b fixed the build",
    "request id 123e4567-e89b-12d3-a456-426614174000 timed out",
    "sha256: e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855",
    "data:image/png;base64,iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mNk",
    "See https://example.com:8080/docs?q=a:b@c and mailto:help@example.com.",
    "The bearer of this letter is my friend.",
    "ssh-rsa AAAAB3NzaC1yc2EAAAADAQABAAABAQ user@host (a public key)",
    "-----BEGIN PUBLIC KEY-----\nMIIBIjANBgkq\n-----END PUBLIC KEY-----",
    "sk-short and sk_live_ alone, AKIA1234 too short",
]


def check(point: str = "output") -> Check:
    return Check(point, AbortController().signal)  # type: ignore[arg-type]


def test_every_secret_kind_has_a_sample() -> None:
    assert set(SECRETS) == set(SECRET_PATTERNS)


@pytest.mark.parametrize("kind", sorted(SECRETS))
def test_each_kind_of_secret_is_found_in_prose_and_redacted(kind: str) -> None:
    secret = SECRETS[kind]
    text = f"Before it. {secret} After it."
    found = Secrets().find(text)
    assert [f.kind for f in found] == [kind]
    verdict = Secrets(action="redact").check(text, check())
    assert verdict.action == "redact" and verdict.text is not None
    assert verdict.text.startswith("Before it. ") and verdict.text.endswith(" After it.")
    label = SECRET_PATTERNS[kind][0]
    assert f"[redacted: {label}]" in verdict.text
    if kind == "url_password":  # only the password goes
        assert "postgres://admin:[redacted: password in a URL]@db.internal" in verdict.text
    assert Secrets().check(text, check()).action == "trip"


@pytest.mark.parametrize("text", ORDINARY)
def test_ordinary_text_is_not_a_secret(text: str) -> None:
    assert Secrets().find(text) == []


def test_a_private_key_without_its_end_is_refused_to_the_end() -> None:
    text = "key:\n-----BEGIN OPENSSH PRIVATE KEY-----\nb3BlbnNzaC1rZXktdjEAAAAA"
    [finding] = Secrets().find(text)
    assert (finding.kind, text[finding.start : finding.end].startswith("-----BEGIN")) == (
        "private_key", True,
    )  # fmt: skip
    assert finding.end == len(text)


def test_kinds_narrow_the_guardrail_and_unknown_kinds_fail_where_given() -> None:
    only_aws = Secrets(kinds=["aws_access_key"])
    assert only_aws.find(SECRETS["openai_key"]) == []
    assert only_aws.find(SECRETS["aws_access_key"])
    with pytest.raises(ValueError, match="unknown secret kinds"):
        Secrets(kinds=["openai", "aws_access_key"])
    with pytest.raises(ValueError, match="unknown PII kinds"):
        PII(kinds=["ssn"])


# --- personal data ------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "kind"),
    [
        ("mail jane.doe+news@mail.example.co.uk today", "email"),
        ("call +1 415 555 0100 now", "phone"),
        ("call (415) 555-0100 now", "phone"),
        ("call +44 20 7946 0958 now", "phone"),
        ("call +14155550100 now", "phone"),
        ("call 06 12 34 56 78 now", "phone"),
        ("card 4111 1111 1111 1111 exp 12/29", "card"),
        ("card 4111-1111-1111-1111.", "card"),
        ("card 5555555555554444", "card"),
        ("amex 3782 822463 10005", "card"),
        ("iban DE89 3704 0044 0532 0130 00 please", "iban"),
        ("iban GB82WEST12345698765432", "iban"),
        ("iban fr14 2004 1010 0505 0001 3m02 606", "iban"),
    ],
)
def test_personal_data_is_found(text: str, kind: str) -> None:
    assert [f.kind for f in PII().find(text)] == [kind]


@pytest.mark.parametrize(
    "text",
    [
        "card 4111 1111 1111 1112 fails its Luhn check",
        "iban DE89 3704 0044 0532 0130 01 fails its checksum",
        "on 2024-01-15 at 12:30, version 1.2.3",
        "the server 192.168.100.200 answered",
        "order 1234 shipped, 40 of 1000 left",
        "user@localhost has no domain",
        "0000 0000 0000 0000 is no card",
    ],
)
def test_what_only_looks_like_personal_data_is_left(text: str) -> None:
    assert PII().find(text) == []


def test_luhn_and_iban_checks() -> None:
    assert luhn_valid("4111111111111111") and luhn_valid("378282246310005")
    assert not luhn_valid("4111111111111112")
    assert iban_valid("DE89 3704 0044 0532 0130 00") and iban_valid("gb82west12345698765432")
    assert not iban_valid("DE89 3704 0044 0532 0130")  # Germany's IBANs have 22 characters
    assert not iban_valid("GB82WEST12345698765431")


def test_redacting_a_tool_calls_arguments_keeps_them_json() -> None:
    arguments = {"to": "jane@example.com", "body": 'say "hi"\nto 4111111111111111', "n": 3}
    verdict = PII(action="redact").check(json.dumps(arguments), check("tool_call"))
    assert verdict.action == "redact" and verdict.text is not None
    assert json.loads(verdict.text) == {
        "to": "[redacted: email address]",
        "body": 'say "hi"\nto [redacted: card number]',
        "n": 3,
    }
    as_number = PII(action="redact").check(
        json.dumps({"card": 4111111111111111}), check("tool_call")
    )
    assert json.loads(as_number.text or "") == {"card": "[redacted: card number]"}


def test_a_pattern_and_a_length_rule() -> None:
    rule = Pattern(r"(?i)\bproject (?P<secret>nightingale)\b", label="code name", action="redact")
    verdict = rule.check("Status of Project Nightingale?", check())
    assert verdict.text == "Status of Project [redacted: code name]?"
    with pytest.raises(ValueError, match="matches empty text"):
        Pattern(r"x*")
    limit = MaxLength(10, action="redact")
    assert limit.check("0123456789ab", check("input")).text == "0123456789 [cut]"
    assert limit.check("short", check("input")).action == "pass"
    streamed = Check("output", AbortController().signal, before="0123456789")  # type: ignore[arg-type]
    assert limit.check("more", streamed).text == " [cut]"
    assert MaxLength(10).check("0123456789ab", check("tool_call")).action == "trip"


def test_a_replacement_that_would_break_json_is_refused() -> None:
    class Nothing(PatternGuardrail):
        def find(self, text: str) -> list[Finding]:
            return []

    with pytest.raises(ValueError, match="replacement"):
        Nothing(replacement='"[{label}]"')
    with pytest.raises(ValueError, match="action"):
        Nothing(action="block")  # type: ignore[arg-type]


# --- hostile input ------------------------------------------------------------------------------

HOSTILE = [
    "a" * 1_000_000,
    "1 " * 500_000,
    "1-" * 500_000,
    "sk-" + "a-" * 500_000,
    "a@" + "b." * 500_000,
    "a@b" + ".c" * 500_000 + "!",
    "-----BEGIN RSA PRIVATE KEY-----\n" * 30_000,
    "https://" + "a:" * 500_000 + "@",
    "https://u:" + "p" * 500_000,
    "AB12 " * 200_000,
    "+1 " * 300_000,
    "(1) " * 250_000,
    "eyJ" + "a" * 20 + ".eyJ" * 200_000,
    "bearer " * 150_000,
    "\u202e\u200bsk-proj-\U0001f600" * 100_000,
    "\ud800\udfff" * 200_000,
]


def test_hostile_input_is_read_in_bounded_time() -> None:
    """Each detector is linear: a megabyte of text made to backtrack is read in a fraction of
    a second. The bound is generous (a pattern that backtracks takes hours on these, not
    seconds): this checks that the scan ends, not how fast."""
    detectors = [Secrets(), PII(), Secrets(action="redact"), PII(action="redact")]
    for text in HOSTILE:
        started = time.monotonic()
        for detector in detectors:
            detector.check(text, check())
            detector.hold(text)
        assert time.monotonic() - started < 30, f"{text[:30]!r}... took too long"


def test_unicode_around_a_secret_is_kept_whole() -> None:
    text = f"🔑 ключ: {SECRETS['github_token']} — 完了"
    verdict = Secrets(action="redact").check(text, check())
    assert verdict.text == "🔑 ключ: [redacted: GitHub token] — 完了"
