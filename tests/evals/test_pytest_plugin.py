"""The pytest plugin on a sample suite, in a pytest of its own (a subprocess): each case an
item, a divergence a failure, a threshold that tolerates failed cases or fails the run, ``-k``
choosing cases, and nothing at all without ``--eval``."""

from __future__ import annotations

import configparser
import os
import subprocess
import sys
from pathlib import Path

import pytest

from agentkit.evals import Dataset, EqualsExpected
from agentkit.sessions import open_store
from tests.evals.support import record_sessions

ROOT = Path(__file__).resolve().parents[2]
PLUGIN = "agentkit.evals.pytest_plugin"
APP = "tests.evals.desk_app"


@pytest.fixture
def suite(tmp_path: Path) -> Path:
    """A folder with a dataset of six recorded turns (three call the tool), and nothing else."""
    store = open_store(tmp_path / "sessions.db")
    record_sessions(store, 3)
    Dataset.from_sessions(store, evaluators=[EqualsExpected()]).to_file(tmp_path / "cases.yaml")
    store.close()
    (tmp_path / "sessions.db").unlink()
    return tmp_path


def pytest_in(folder: Path, *argv: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    return subprocess.run(
        [sys.executable, "-m", "pytest", "-p", PLUGIN, "-p", "no:cacheprovider", "-rA",
         f"--rootdir={folder}", *argv],
        cwd=folder, env=env, capture_output=True, text=True, timeout=300,
    )  # fmt: skip


@pytest.mark.processes
def test_each_case_is_an_item_and_the_report_ends_the_summary(suite: Path) -> None:
    done = pytest_in(suite, "--eval", "cases.yaml", "--eval-agent", f"{APP}:make_agent")
    assert done.returncode == 0, done.stdout + done.stderr
    assert "6 passed" in done.stdout
    assert "PASSED cases.yaml::chat-0#1" in done.stdout
    assert "agentkit eval: sessions" in done.stdout
    assert "sessions (replay): 6 cases: 6 passed" in done.stdout


@pytest.mark.processes
def test_a_diverged_case_fails_its_item(suite: Path) -> None:
    done = pytest_in(suite, "--eval", "cases.yaml", "--eval-agent", f"{APP}:make_colder_agent")
    assert done.returncode == 1
    assert "3 failed, 3 passed" in done.stdout
    assert "case 'chat-0#1' diverged: diverged at request 2: weather (call_1) now returns" in \
        done.stdout  # fmt: skip


@pytest.mark.processes
def test_a_threshold_tolerates_failed_cases_or_fails_the_run(suite: Path) -> None:
    common = ["--eval", "cases.yaml", "--eval-agent", f"{APP}:make_colder_agent"]
    tolerated = pytest_in(suite, *common, "--eval-min-pass-rate", "0.5")
    assert tolerated.returncode == 0, tolerated.stdout
    assert "3 passed, 3 xfailed" in tolerated.stdout
    failed = pytest_in(suite, *common, "--eval-min-pass-rate", "0.6")
    assert failed.returncode == 1
    assert "3 passed, 3 xfailed" in failed.stdout
    assert "FAILED: pass rate 50% is under the threshold 60%" in failed.stdout


@pytest.mark.processes
def test_k_chooses_the_cases_that_run(suite: Path) -> None:
    done = pytest_in(suite, "--eval", "cases.yaml", "--eval-agent", f"{APP}:make_agent",
                     "-k", "chat-1")  # fmt: skip
    assert done.returncode == 0, done.stdout
    assert "2 passed, 4 deselected" in done.stdout
    assert "sessions (replay): 2 cases: 2 passed" in done.stdout


@pytest.mark.processes
def test_the_plugin_is_inert_without_eval(suite: Path) -> None:
    (suite / "test_plain.py").write_text(
        "import sys\n\n\ndef test_nothing_of_the_evaluations_was_loaded():\n"
        "    loaded = [m for m in sys.modules if m.startswith('agentkit.evals.')]\n"
        "    assert loaded == ['agentkit.evals.pytest_plugin'], loaded\n",
        encoding="utf-8",
    )
    done = pytest_in(suite)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "1 passed" in done.stdout and "agentkit eval" not in done.stdout
    usage = pytest_in(suite, "--eval", "cases.yaml")
    assert usage.returncode == 4 and "--eval needs --eval-agent" in usage.stderr


def test_setup_cfg_registers_the_plugin_under_its_module_name() -> None:
    config = configparser.ConfigParser()
    config.read(ROOT / "setup.cfg")
    entry = config["options.entry_points"]["pytest11"].strip()
    assert entry == f"{PLUGIN} = {PLUGIN}"
