"""MariaDB for the KFP API server, from Debian's packages, run as a host process.

The API server stores pipelines, runs and experiments in MySQL or PostgreSQL. Debian's
`mariadb-server` package would install a system service; instead its binaries are unpacked from
the packages (`apt-get download`, `dpkg-deb -x`) into the cache, with the two libraries the host
lacks beside them, and one server runs on 127.0.0.1 with its data in the cluster's state
directory: nothing is installed on the host and `cluster-down` leaves nothing.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
from pathlib import Path

from tools.cluster import operators, processes

PACKAGES = ("mariadb-server-core", "mariadb-client-core", "libaio1", "liburing2")
CACHE = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "kubetrain" / "kfp-mariadb"
PORT = 13306
USER = "kfp"
PASSWORD = "kfp-e2e"  # a throwaway server on loopback, gone with the cluster


class MariaDBError(RuntimeError):
    """MariaDB could not be unpacked or started; the message says which step and shows its output."""


def install() -> Path:
    """The unpacked packages (their /usr), downloaded once into the cache."""
    key = hashlib.sha256(" ".join(PACKAGES).encode()).hexdigest()[:16]
    root = CACHE / key
    if (root / "usr" / "sbin" / "mariadbd").exists():
        return root / "usr"
    work = CACHE / f"{key}.download"
    shutil.rmtree(work, ignore_errors=True)
    (work / "tree").mkdir(parents=True)
    _run(["apt-get", "download", *PACKAGES], cwd=work)
    for deb in sorted(work.glob("*.deb")):
        _run(["dpkg-deb", "-x", str(deb), "tree"], cwd=work)
    shutil.rmtree(root, ignore_errors=True)
    (work / "tree").rename(root)
    shutil.rmtree(work)
    return root / "usr"


def _env(usr: Path) -> dict[str, str]:
    return {**os.environ, "LD_LIBRARY_PATH": str(usr / "lib" / "x86_64-linux-gnu")}


def _run(argv: list[str], *, cwd: Path, env: dict[str, str] | None = None, stdin: str | None = None) -> None:
    done = subprocess.run(argv, cwd=cwd, env=env, input=stdin, capture_output=True, text=True, check=False,
                          timeout=300)  # fmt: skip
    if done.returncode != 0:
        raise MariaDBError(f"{' '.join(argv[:3])}: exit {done.returncode}: {(done.stderr or done.stdout)[-1500:]}")


def start(state: Path) -> None:
    """Start the server (data and socket under `state/mariadb`) with the API server's user; wait until it answers."""
    usr = install()
    home = state / "mariadb"
    data, socket = home / "data", home / "mysqld.sock"
    processes.require_free({PORT: "MariaDB (the KFP API server's database)"})
    if not (data / "mysql").exists():
        data.mkdir(parents=True, exist_ok=True)
        _run([str(usr / "bin" / "mariadb-install-db"), "--no-defaults", f"--basedir={usr}", f"--datadir={data}",
              "--user=root", "--auth-root-authentication-method=normal", "--skip-test-db"],
             cwd=home, env=_env(usr))  # fmt: skip
    argv = [str(usr / "sbin" / "mariadbd"), "--no-defaults", f"--basedir={usr}", f"--datadir={data}",
            "--user=root", "--bind-address=127.0.0.1", f"--port={PORT}", f"--socket={socket}",
            f"--pid-file={home / 'mariadbd.pid'}", "--skip-name-resolve", f"--lc-messages-dir={usr / 'share/mysql'}",
            "--innodb-buffer-pool-size=64M", "--max-connections=200"]  # fmt: skip
    processes.start(state, "mariadb", argv, env=_env(usr), log=home / "mariadbd.log", cwd=home)
    operators.wait_for("MariaDB", socket.exists, 60, home / "mariadbd.log")
    grant = (f"CREATE USER IF NOT EXISTS '{USER}'@'127.0.0.1' IDENTIFIED BY '{PASSWORD}';"
             f"GRANT ALL PRIVILEGES ON *.* TO '{USER}'@'127.0.0.1';")  # fmt: skip
    client = [str(usr / "bin" / "mariadb"), "--no-defaults", f"--socket={socket}", "-uroot"]
    operators.wait_for("MariaDB", lambda: _answers(client, usr, home), 60, home / "mariadbd.log")
    _run(client, cwd=home, env=_env(usr), stdin=grant)


def _answers(client: list[str], usr: Path, home: Path) -> bool:
    try:
        _run([*client, "-e", "SELECT 1"], cwd=home, env=_env(usr))
    except MariaDBError:
        return False
    return True
