"""A real sshd on loopback addresses (127.0.0.1 and 127.0.0.2 stand for two hosts), with a host key and a
client key generated for the test; for the ssh launcher's tests. The machine's own sshd and keys are
left alone.

Each host's sessions get a TMPDIR of their own (``SetEnv`` in a ``Match LocalAddress`` block), as the nodes of
a cluster have their own /tmp: whatever one node writes there, the other cannot read."""

from __future__ import annotations

import os
import shutil
import subprocess
import time
from pathlib import Path

from perfgate.launch.agents import free_port

HOSTS = ("127.0.0.1", "127.0.0.2")


def missing() -> str | None:
    """Why no sshd can start here, or None."""
    absent = [name for name in ("sshd", "ssh", "ssh-keygen") if shutil.which(name) is None]
    if absent:
        return f"OpenSSH is not installed ({', '.join(absent)} missing): apt-get install openssh-server"
    if os.geteuid() != 0:
        return "the test sshd logs in as root with the test's key; run the tests as root"
    return None


class SshServer:
    def __init__(self, root: Path) -> None:
        self.root = root
        self.port = free_port()
        self.key = root / "client_key"
        self._sshd: subprocess.Popen | None = None
        self.tmpdirs = {host: root / f"tmp-{host}" for host in HOSTS}
        """Each host's TMPDIR."""

    @property
    def client_args(self) -> str:
        """--ssh-args for the launcher: this server's port and key, its host key unrecorded."""
        return (f"-p {self.port} -i {self.key} -o StrictHostKeyChecking=no -o UserKnownHostsFile=/dev/null "
                "-o LogLevel=ERROR")

    def start(self) -> "SshServer":
        root = self.root
        for key in ("host_key", "client_key"):
            subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(root / key)], check=True)
        (root / "authorized_keys").write_text((root / "client_key.pub").read_text())
        for tmpdir in self.tmpdirs.values():
            tmpdir.mkdir()
        Path("/run/sshd").mkdir(mode=0o755, exist_ok=True)
        config = root / "sshd_config"
        config.write_text("\n".join([
            f"Port {self.port}", *[f"ListenAddress {host}" for host in HOSTS], f"HostKey {root / 'host_key'}",
            f"PidFile {root / 'sshd.pid'}", f"AuthorizedKeysFile {root / 'authorized_keys'}",
            "PermitRootLogin prohibit-password", "PasswordAuthentication no", "KbdInteractiveAuthentication no",
            "UsePAM no", "StrictModes no", "MaxStartups 50",
            *[f"Match LocalAddress {host}\n    SetEnv TMPDIR={tmpdir}" for host, tmpdir in self.tmpdirs.items()], "",
        ]))
        log = (root / "sshd.log").open("w")
        self._sshd = subprocess.Popen([shutil.which("sshd"), "-D", "-e", "-f", str(config)], stdout=log,
                                      stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)
        deadline = time.monotonic() + 30
        while subprocess.run(["ssh", "-o", "BatchMode=yes", *self.client_args.split(), HOSTS[1], "true"],
                             capture_output=True).returncode != 0:
            if self._sshd.poll() is not None or time.monotonic() > deadline:
                self.stop()
                raise RuntimeError(f"the test sshd did not accept the test key: {(root / 'sshd.log').read_text()}")
            time.sleep(0.2)
        return self

    def stop(self) -> None:
        if self._sshd is not None:
            self._sshd.terminate()
            self._sshd.wait(timeout=15)
