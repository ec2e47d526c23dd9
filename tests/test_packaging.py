"""The functional folders install as subpackages of `hangar` from a wheel, not only editable."""

from __future__ import annotations

import subprocess
import sys
import sysconfig
import zipfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
SUBPACKAGES = ("sandbox", "scheduler", "verifiers", "cluster", "dashboards")


@pytest.fixture(scope="module")
def wheel(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("wheel")
    subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "-w", str(out), str(ROOT)],
        check=True,
        capture_output=True,
        timeout=600,
    )
    (found,) = out.glob("hangar_farm-*.whl")
    return found


@pytest.mark.slow
def test_wheel_maps_folders_into_hangar(wheel: Path) -> None:
    names = set(zipfile.ZipFile(wheel).namelist())
    for sub in SUBPACKAGES:
        assert f"hangar/{sub}/__init__.py" in names
    assert "hangar/sandbox/docker.py" in names and "hangar/py.typed" in names
    assert not any(n.split("/")[0] in SUBPACKAGES for n in names), "a folder leaked to top level"


@pytest.mark.slow
def test_wheel_install_imports_everything(wheel: Path, tmp_path: Path) -> None:
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True, timeout=120)
    py = venv / "bin" / "python"
    subprocess.run(
        [str(py), "-m", "pip", "install", "-q", "--no-deps", str(wheel)],
        check=True,
        capture_output=True,
        timeout=300,
    )
    # Dependencies come from the test environment's site-packages, appended *after* the
    # new venv's own, so `hangar` itself is the wheel's copy, never the editable one.
    site = Path(
        subprocess.check_output(
            [str(py), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"], text=True
        ).strip()
    )
    (site / "deps.pth").write_text(sysconfig.get_paths()["purelib"] + "\n")
    code = (
        "import hangar, hangar.sandbox, hangar.scheduler, hangar.verifiers, hangar.cluster, "
        "hangar.dashboards, hangar.sandbox.docker, hangar.sandbox.local, hangar.sandbox.images; "
        "print(hangar.sandbox.__file__)"
    )
    where = subprocess.run(
        [str(py), "-c", code], capture_output=True, text=True, timeout=120, cwd=tmp_path
    )
    assert where.returncode == 0, where.stderr
    assert Path(where.stdout.strip()).is_relative_to(venv)
    cli = subprocess.run(
        [str(venv / "bin" / "hangar"), "version"], capture_output=True, text=True, timeout=120
    )
    assert cli.returncode == 0 and "hangar" in cli.stdout


def test_every_package_folder_is_listed() -> None:
    import tomllib

    config = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]
    listed, mapping = set(config["packages"]), config["package-dir"]
    found = set()
    for package, folder in mapping.items():
        for init in (ROOT / folder).rglob("__init__.py"):
            rel = init.parent.relative_to(ROOT / folder).parts
            found.add(".".join((package, *rel)))
    assert found <= listed, f"packages missing from pyproject.toml: {sorted(found - listed)}"
