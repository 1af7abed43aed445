"""A real PostgreSQL server on loopback for the results database's tests: its own data directory, port and
socket, a role with a password (scram-sha-256 over TCP), and a database of its own. The machine's clusters are
left alone. initdb refuses root, so as root the server runs as the ``postgres`` user Debian's package creates."""

from __future__ import annotations

import glob
import os
import pwd
import secrets
import shutil
import subprocess
import tempfile
from pathlib import Path

from perfgate.launch.agents import free_port


def _binary(name: str) -> str | None:
    found = sorted(glob.glob(f"/usr/lib/postgresql/*/bin/{name}"), key=lambda p: int(Path(p).parts[4]))
    return found[-1] if found else shutil.which(name)


def missing() -> str | None:
    """Why no PostgreSQL server can start here, or None."""
    absent = [name for name in ("initdb", "pg_ctl", "psql") if _binary(name) is None]
    if absent:
        return f"PostgreSQL is not installed ({', '.join(absent)} missing): apt-get install postgresql"
    if os.geteuid() == 0:
        try:
            pwd.getpwnam("postgres")
        except KeyError:
            return "running as root with no 'postgres' user to run the server as (initdb refuses root)"
    return None


class PostgresServer:
    def __init__(self) -> None:
        self.root = Path(tempfile.mkdtemp(prefix="perfgate-postgres-"))
        self.port = free_port()
        self.password = "pw-" + secrets.token_hex(8)

    def url(self, password: bool = True, database: str = "perfgate") -> str:
        secret = f":{self.password}" if password else ""
        return f"postgresql://perfgate{secret}@127.0.0.1:{self.port}/{database}"

    def new_database(self, name: str) -> str:
        """The URL of a new, empty database ``name`` owned by the perfgate role."""
        self._psql(f"CREATE DATABASE {name} OWNER perfgate")
        return self.url(database=name)

    def _psql(self, sql: str) -> None:
        self._run(_binary("psql"), "-h", str(self.root), "-p", str(self.port), "-U", "postgres", "-v",
                  "ON_ERROR_STOP=1", "-c", sql)

    def _run(self, *command: str) -> None:
        prefix = ["runuser", "-u", "postgres", "--"] if os.geteuid() == 0 else []
        subprocess.run([*prefix, *command], check=True, capture_output=True, text=True, timeout=120, cwd=self.root)

    def start(self) -> "PostgresServer":
        if os.geteuid() == 0:
            account = pwd.getpwnam("postgres")
            os.chown(self.root, account.pw_uid, account.pw_gid)
        data = self.root / "data"
        self._run(_binary("initdb"), "-D", str(data), "-U", "postgres", "--auth-local=trust",
                  "--auth-host=scram-sha-256")
        self._run(_binary("pg_ctl"), "-D", str(data), "-l", str(self.root / "server.log"), "-w", "-t", "60", "-o",
                  f"-p {self.port} -k {self.root} -c listen_addresses=127.0.0.1", "start")
        self._psql(f"CREATE ROLE perfgate LOGIN PASSWORD '{self.password}'")
        self.new_database("perfgate")
        return self

    def stop(self) -> None:
        self._run(_binary("pg_ctl"), "-D", str(self.root / "data"), "-m", "immediate", "-w", "stop")
        shutil.rmtree(self.root, ignore_errors=True)
