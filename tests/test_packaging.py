"""The wheel installs nothing at top level but `labctl`, carries its data and catalogs, and
works from an empty folder where the learner's own `clean_room` is the only one."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import sysconfig
import zipfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
# Local state at the repository's top that a wheel must not be built from (labctl/evidence is code).
NOT_SOURCE = {".git", ".venv", "build", "dist", "evidence", ".pytest_cache", ".ruff_cache"}


def _not_source(directory: str, names: list[str]) -> set[str]:
    top = Path(directory) == ROOT
    return {
        n
        for n in names
        if (top and n in NOT_SOURCE) or n == "__pycache__" or n.endswith(".egg-info")
    }


def build_wheel(source: Path, out: Path) -> Path:
    """A wheel of a copy of `source` (building in the repository would write build/ into it)."""
    tree = out / "src"
    shutil.copytree(source, tree, ignore=_not_source)
    subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "-q",
         str(tree), "-w", str(out)],
        check=True, capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    (wheel,) = out.glob("*.whl")
    return wheel


def top_level(wheel: Path) -> set[str]:
    """What the wheel puts directly into site-packages (dist-info aside)."""
    with zipfile.ZipFile(wheel) as archive:
        names = {name.split("/")[0] for name in archive.namelist()}
    return {n for n in names if not n.endswith(".dist-info")}


@pytest.fixture(scope="module")
def wheel(tmp_path_factory) -> Path:
    return build_wheel(ROOT, tmp_path_factory.mktemp("wheel"))


def test_the_wheel_installs_only_the_labctl_package(wheel):
    assert top_level(wheel) == {"labctl"}
    with zipfile.ZipFile(wheel) as archive:
        names = set(archive.namelist())
    for needed in (
        "labctl/i18n/locale/zh/LC_MESSAGES/labctl.po",
        "labctl/data/contract_v1.json",
        "labctl/data/contract-v1.md",
        "labctl/data/contract-v2.md",
        "labctl/data/tolerances-v2.json",
        "labctl/labs/causal_attention.py",
        "labctl/clean_room/attention.py",
        "labctl/evidence/models.py",
    ):
        assert needed in names, needed


@pytest.mark.slow
def test_the_top_level_check_catches_a_wheel_that_ships_clean_room(tmp_path):
    source = tmp_path / "faulty"
    shutil.copytree(ROOT, source, ignore=_not_source)
    pyproject = source / "pyproject.toml"
    text = pyproject.read_text()
    # the mapping dropped: clean_room/ becomes a top-level package of its own
    text = text.replace('"labctl.clean_room" = "clean_room"\n', "")
    text = text.replace('    "labctl.clean_room",\n', '    "clean_room",\n')
    pyproject.write_text(text)
    assert top_level(build_wheel(source, tmp_path / "out")) == {"labctl", "clean_room"}


def _declared_packages() -> tuple[list[str], dict[str, str]]:
    import tomllib

    setuptools = tomllib.loads((ROOT / "pyproject.toml").read_text("utf-8"))["tool"]["setuptools"]
    return setuptools["packages"], setuptools["package-dir"]


def test_the_design_cards_layout_labs_and_clean_room_at_the_top_level():
    for name in ("labctl", "labs", "clean_room", "tests", "evidence"):
        assert (ROOT / name).is_dir(), name
    assert not (ROOT / "labctl" / "labs").exists()
    assert not (ROOT / "labctl" / "clean_room").exists()
    packages, mapping = _declared_packages()
    assert mapping == {"labctl.labs": "labs", "labctl.clean_room": "clean_room"}
    # every package folder is declared, so a new one cannot be left out of the wheel
    found = {
        ".".join(init.parent.relative_to(ROOT).parts)
        for init in (ROOT / "labctl").rglob("__init__.py")
        if "__pycache__" not in init.parts
    }
    found |= {f"labctl.{folder}" for folder in mapping.values()}
    assert set(packages) == found


def test_the_editable_install_finds_labs_and_clean_room_where_the_tree_has_them(tmp_path):
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    probe = subprocess.run(
        [sys.executable, "-c",
         "import importlib.util as u, labctl.labs, labctl.clean_room\n"
         "print(labctl.labs.__file__); print(labctl.clean_room.__file__)\n"
         "print(u.find_spec('clean_room'), u.find_spec('labs'))"],
        cwd=tmp_path, env=env, check=True, capture_output=True, text=True,
    ).stdout.splitlines()  # fmt: skip
    installed = Path(probe[0]).resolve().parents[1]
    if installed == ROOT:  # an editable install of this checkout
        assert probe[:2] == [
            str(ROOT / "labs" / "__init__.py"),
            str(ROOT / "clean_room" / "__init__.py"),
        ]
    else:  # a wheel: both live inside the installed labctl
        assert Path(probe[0]).parent.parent.name == "labctl"
    # from a folder of its own, a learner's `import clean_room` never finds the project's
    assert probe[2] == "None None"


def _environment_paths() -> list[str]:
    """The site-packages this interpreter imports torch and the rest from (not labctl itself)."""
    paths = {sysconfig.get_paths()["purelib"], sysconfig.get_paths()["platlib"]}
    paths |= {p for p in sys.path if p.endswith("site-packages")}
    return sorted(p for p in paths if Path(p).is_dir())


@pytest.mark.slow
def test_the_installed_wheel_runs_every_lab_from_an_empty_folder(wheel, tmp_path):
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True)
    python = venv / "bin" / "python"
    site = Path(
        subprocess.run(
            [str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
            check=True, capture_output=True, text=True,
        ).stdout.strip()
    )  # fmt: skip
    # Dependencies come from this environment; labctl only from the wheel, installed first.
    (site / "deps.pth").write_text("\n".join(_environment_paths()) + "\n")
    subprocess.run(
        [sys.executable, "-m", "pip", "--python", str(python), "install", "--no-deps",
         "--no-index", "-q", str(wheel)],
        check=True, capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    empty = tmp_path / "empty"
    empty.mkdir()
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV")}
    where = subprocess.run(
        [str(python), "-c", "import labctl; print(labctl.__file__)"],
        cwd=empty, env=env, check=True, capture_output=True, text=True,
    ).stdout  # fmt: skip
    assert where.startswith(str(site)), f"labctl came from {where}, not the installed wheel"
    for name in ("clean_room", "labs"):
        probe = subprocess.run(
            [str(python), "-c", f"import {name}"],
            cwd=empty,
            env=env,
            capture_output=True,
            text=True,
        )
        assert probe.returncode != 0 and "ModuleNotFoundError" in probe.stderr, name
    run = subprocess.run(
        [str(venv / "bin" / "labctl"), "run", "all", "--json", "--out", str(empty / "runs")],
        cwd=empty, env=env, capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert run.returncode == 0, run.stderr[-2000:]
    assert '"passed": true' in run.stdout
