from __future__ import annotations

import socket
from collections.abc import Iterator
from contextlib import contextmanager

import pytest

from cronwarden.embedded import ensure_port_free, free_port
from cronwarden.errors import EXIT_FAILED, PortInUse


@contextmanager
def _listening() -> Iterator[int]:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        sock.listen(1)
        yield sock.getsockname()[1]


def test_it_raises_port_in_use_naming_the_port_and_the_flag() -> None:
    with _listening() as port, pytest.raises(PortInUse) as caught:
        ensure_port_free(port, what="the Temporal frontend", flag="--temporal-port")

    assert str(caught.value) == (
        f"port {port} on 127.0.0.1, wanted by the Temporal frontend, is already in use; "
        "pass --temporal-port to choose another"
    )
    assert caught.value.exit_code == EXIT_FAILED


def test_it_accepts_a_free_port() -> None:
    ensure_port_free(free_port(), what="the embedded Postgres", flag="--postgres-port")


def test_it_accepts_the_port_of_a_server_that_has_just_stopped() -> None:
    # The server closed its side first, so the port holds a TIME_WAIT connection; like Postgres
    # and Temporal, the fake server set SO_REUSEADDR, so a restart on that port must be allowed.
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as server:
        server.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        server.bind(("127.0.0.1", 0))
        server.listen(1)
        port = server.getsockname()[1]
        with socket.create_connection(("127.0.0.1", port)):
            accepted, _ = server.accept()
            accepted.close()

    ensure_port_free(port, what="the embedded Postgres", flag="--postgres-port")


def test_free_port_does_not_hand_out_the_same_port_twice() -> None:
    ports = [free_port() for _ in range(200)]

    assert len(set(ports)) == len(ports)
