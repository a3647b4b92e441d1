"""The built wheel: it ships the migrations, and an installed copy upgrades a database from any directory.

The editable install finds the migrations in the repository's ``migrations/``;
an installed wheel must find its own copy as the package resource
``turnstore:migrations``. Only a real wheel in a clean venv exercises that path.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

from turnstore import migrate

REPO = Path(__file__).resolve().parents[1]
SHIPPED = {
    "turnstore/migrations/env.py": REPO / "migrations" / "env.py",
    "turnstore/migrations/versions/0001_initial.py": REPO / "migrations" / "versions" / "0001_initial.py",
    "turnstore/py.typed": REPO / "src" / "turnstore" / "py.typed",
}


def clean_env() -> dict[str, str]:
    """The environment without anything that would point a child at this checkout or database."""
    env = dict(os.environ)
    for name in ("PYTHONPATH", "PYTHONHOME", "VIRTUAL_ENV", "TURNSTORE_URL", "TURNSTORE_DEBUG"):
        env.pop(name, None)
    return env


def run(argv: list[str | os.PathLike[str]], *, cwd: Path, timeout: float) -> str:
    result = subprocess.run(
        [os.fspath(a) for a in argv], cwd=cwd, env=clean_env(), capture_output=True, text=True, timeout=timeout
    )
    assert result.returncode == 0, f"{argv} failed ({result.returncode}):\n{result.stdout}\n{result.stderr}"
    return result.stdout


@pytest.fixture(scope="module")
def wheel(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A wheel built from this checkout."""
    pytest.importorskip("build", reason="the 'build' package is needed to build a wheel (pip install -e '.[test]')")
    outdir = tmp_path_factory.mktemp("dist")
    run([sys.executable, "-m", "build", "--wheel", "--outdir", outdir], cwd=REPO, timeout=600)
    wheels = list(outdir.glob("turnstore-*.whl"))
    assert len(wheels) == 1, wheels
    return wheels[0]


@pytest.mark.slow
def test_wheel_ships_the_migrations(wheel: Path) -> None:
    with zipfile.ZipFile(wheel) as archive:
        names = set(archive.namelist())
        assert set(SHIPPED) <= names, sorted(n for n in names if "migrations" in n or n.endswith("py.typed"))
        # The shipped scripts are the repository's, not a stale copy.
        for name, source in SHIPPED.items():
            assert archive.read(name) == source.read_bytes(), name
        assert "turnstore/migrations/script.py.mako" in names
        # The development-only files stay out of the wheel.
        assert not any(n.endswith("alembic.ini") for n in names)


@pytest.mark.slow
def test_wheel_ships_the_viewers_templates_and_static_files(wheel: Path) -> None:
    web = REPO / "src" / "turnstore" / "web"
    files = [path for folder in ("templates", "static") for path in sorted((web / folder).iterdir())]
    assert len(files) >= 7
    with zipfile.ZipFile(wheel) as archive:
        for path in files:
            name = f"turnstore/web/{path.parent.name}/{path.name}"
            assert archive.read(name) == path.read_bytes(), name


@pytest.mark.slow
def test_installed_wheel_upgrades_from_any_directory(wheel: Path, tmp_path: Path) -> None:
    venv = tmp_path / "venv"
    run([sys.executable, "-m", "venv", venv], cwd=tmp_path, timeout=300)
    python = venv / "bin" / "python"
    # A clean venv: dependencies come from the package index.
    run([python, "-m", "pip", "install", "--quiet", wheel], cwd=tmp_path, timeout=900)

    workdir = tmp_path / "elsewhere"
    workdir.mkdir()
    head = migrate.head()

    script = (
        "import json, turnstore\n"
        "from turnstore import Store, migrate\n"
        "s = Store('x.db')\n"
        "print(json.dumps({'version': s.schema_version(), 'location': migrate.script_location(),\n"
        "                  'check': [str(d) for d in migrate.check(s.engine)], 'file': turnstore.__file__}))\n"
    )
    report = json.loads(run([python, "-c", script], cwd=workdir, timeout=120))
    assert report["version"] == head
    # The installed copy uses its own packaged scripts, never this checkout's.
    assert report["location"] == "turnstore:migrations"
    assert Path(report["file"]).is_relative_to(venv)
    assert report["check"] == []
    assert (workdir / "x.db").is_file()

    turnstore_cli = venv / "bin" / "turnstore"
    upgraded = run([turnstore_cli, "--db", "y.db", "db", "upgrade"], cwd=workdir, timeout=120)
    assert upgraded.strip() == f"upgraded empty database -> {head}"
    current = json.loads(run([turnstore_cli, "--db", "y.db", "--json", "db", "current"], cwd=workdir, timeout=120))
    assert current == {"current": head, "head": head, "up_to_date": True}
    text = run([turnstore_cli, "--db", "y.db", "db", "current"], cwd=workdir, timeout=120)
    assert text.split()[0] == head
    run([turnstore_cli, "--db", "y.db", "db", "check"], cwd=workdir, timeout=120)
