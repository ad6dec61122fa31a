"""The sdist and the wheel carry every file of labctl (labs, clean room, contracts, catalogs,
data), pass `twine check`, install nothing at top level but `labctl`, and the installed wheel
runs a lab, a verify and a grade from a folder of its own, apart from the source tree."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import sysconfig
import tarfile
import zipfile
from pathlib import Path

import pytest
from honestrooms import honest_room

ROOT = Path(__file__).resolve().parents[1]
# Local state at the repository's top that a wheel must not be built from (labctl/evidence is code).
NOT_SOURCE = {".git", ".venv", "build", "dist", "evidence", ".pytest_cache", ".ruff_cache"}
FILTERS = hasattr(tarfile, "data_filter")  # Python 3.10.12+, 3.11.4+
# Where each source folder lands in the wheel (pyproject's package-dir).
SHIPPED = {"labctl": "labctl", "labs": "labctl/labs", "clean_room": "labctl/clean_room"}


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


def build_sdist(source: Path, out: Path) -> Path:
    """The sdist of a copy of `source`, through the build backend, as `python -m build` makes it."""
    tree = out / "sdist-src"
    shutil.copytree(source, tree, ignore=_not_source)
    done = subprocess.run(
        [sys.executable, "-c",
         "import sys; from setuptools import build_meta; print(build_meta.build_sdist(sys.argv[1]))",
         str(out)],
        cwd=tree, check=True, capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    return out / done.stdout.strip().splitlines()[-1]


def source_files() -> set[str]:
    """Every file of the packages in the source tree, as the wheel must hold it."""
    found = set()
    for folder, shipped in SHIPPED.items():
        for path in (ROOT / folder).rglob("*"):
            if path.is_file() and "__pycache__" not in path.parts:
                found.add(f"{shipped}/{path.relative_to(ROOT / folder).as_posix()}")
    return found


def top_level(wheel: Path) -> set[str]:
    """What the wheel puts directly into site-packages (dist-info aside)."""
    with zipfile.ZipFile(wheel) as archive:
        names = {name.split("/")[0] for name in archive.namelist()}
    return {n for n in names if not n.endswith(".dist-info")}


@pytest.fixture(scope="module")
def sdist(tmp_path_factory) -> Path:
    return build_sdist(ROOT, tmp_path_factory.mktemp("sdist"))


@pytest.fixture(scope="module")
def wheel(sdist, tmp_path_factory) -> Path:
    """The wheel built from the sdist, as `python -m build` and pip build it: what the sdist
    lacks, the wheel lacks too."""
    out = tmp_path_factory.mktemp("wheel")
    with tarfile.open(sdist) as archive:
        archive.extractall(out / "unpacked", **({"filter": "data"} if FILTERS else {}))
    (tree,) = (out / "unpacked").iterdir()
    return build_wheel(tree, out)


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


def test_the_wheel_carries_every_file_of_the_source_packages(wheel):
    """Labs, clean room, contracts, catalogs, every data file: a file added to the tree and
    left out of package-data is named here."""
    with zipfile.ZipFile(wheel) as archive:
        names = set(archive.namelist())
    assert source_files() - names == set()


def test_the_sdist_carries_the_documents_the_readme_links(sdist):
    with tarfile.open(sdist) as archive:
        names = {name.split("/", 1)[1] for name in archive.getnames() if "/" in name}
    for needed in ("README.md", "README.zh-CN.md", "docs/learners.md", "docs/graders.md"):
        assert needed in names, needed


def test_the_wheel_and_the_sdist_pass_twine_check(wheel, sdist):
    if shutil.which("twine", path=str(Path(sys.executable).parent)) is None:
        if os.environ.get("CI") == "true":
            pytest.fail("twine is missing: pip install -e '.[dev]' installs it")
        pytest.skip("twine is not installed (pip install -e '.[dev]')")
    done = subprocess.run(
        [sys.executable, "-m", "twine", "check", "--strict", str(wheel), str(sdist)],
        capture_output=True, text=True, timeout=120, env={**os.environ, "NO_COLOR": "1"},
    )  # fmt: skip
    assert done.returncode == 0, done.stdout + done.stderr
    assert done.stdout.count("PASSED") == 2, done.stdout


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


GRADE_RUBRIC = """schema: labctl.rubric.v1
name: installed
items:
  - {id: fn.softmax, kind: function, target: softmax, points: 4}
  - {id: fn.rope, kind: function, target: rope, points: 4}
"""


@pytest.fixture(scope="module")
def installed(wheel, tmp_path_factory) -> tuple[Path, Path, dict[str, str]]:
    """A fresh virtual environment holding labctl from the wheel alone: (its bin, its
    site-packages, the environment to run it in). Its dependencies are this environment's,
    on its path through a .pth file (no download); this source tree is on no path of it."""
    venv = tmp_path_factory.mktemp("installed") / "venv"
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
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV")}
    return venv / "bin", site, {**env, "NO_COLOR": "1"}


def _labctl(installed, cwd: Path, *args: str) -> subprocess.CompletedProcess:
    bin_, _, env = installed
    return subprocess.run(
        [str(bin_ / "labctl"), *args], cwd=cwd, env=env, capture_output=True, text=True,
        timeout=300,
    )  # fmt: skip


@pytest.mark.slow
def test_the_installed_wheel_runs_every_lab_from_an_empty_folder(installed, tmp_path):
    bin_, site, env = installed
    empty = tmp_path / "empty"
    empty.mkdir()
    where = subprocess.run(
        [str(bin_ / "python"), "-c", "import labctl; print(labctl.__file__)"],
        cwd=empty, env=env, check=True, capture_output=True, text=True,
    ).stdout  # fmt: skip
    assert where.startswith(str(site)), f"labctl came from {where}, not the installed wheel"
    for name in ("clean_room", "labs"):
        probe = subprocess.run(
            [str(bin_ / "python"), "-c", f"import {name}"],
            cwd=empty,
            env=env,
            capture_output=True,
            text=True,
        )
        assert probe.returncode != 0 and "ModuleNotFoundError" in probe.stderr, name
    run = _labctl(installed, empty, "run", "all", "--json", "--out", str(empty / "runs"))
    assert run.returncode == 0, run.stderr[-2000:]
    assert json.loads(run.stdout)["passed"] is True
    # the contract's documents ship: what a diagnosis points a learner to opens
    document = _labctl(installed, empty, "contract", "document", "--json")
    assert document.returncode == 0, document.stderr
    assert json.loads(document.stdout)["path"].startswith(str(site))


@pytest.mark.slow
def test_the_installed_wheel_verifies_and_grades_a_room_of_its_own_folder(installed, tmp_path):
    _, site, _ = installed
    work = tmp_path / "elsewhere"
    # A learner's own room: the wheel's own is base code, and grading gives it nothing.
    honest_room(work / "my_room")
    verify = _labctl(installed, work, "verify", "clean-room", "--path", "my_room", "--no-metrics",
                     "--json")  # fmt: skip
    assert verify.returncode == 0, verify.stderr[-2000:]
    assert json.loads(verify.stdout)["passed"] is True
    shutil.copytree(work / "my_room", work / "class" / "ann" / "clean_room")
    (work / "rubric.yaml").write_text(GRADE_RUBRIC, "utf-8")
    grade = _labctl(installed, work, "grade", "class", "class", "--out", "grades",
                    "--rubric", "rubric.yaml", "--json")  # fmt: skip
    assert grade.returncode == 0, grade.stderr[-2000:]
    document = json.loads(grade.stdout)
    assert document["passed"] is True
    assert [(r["learner"], r["status"], r["score"]) for r in document["rows"]] == [
        ("ann", "graded", 8)
    ]
