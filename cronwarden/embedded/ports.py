"""Free TCP ports for the embedded servers, and a check that fails fast when one is taken."""

from __future__ import annotations

import errno
import socket

from cronwarden.errors import CronwardenError, PortInUse

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
    return tcp_answers(host, port)


def tcp_answers(host: str, port: int) -> bool:
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
