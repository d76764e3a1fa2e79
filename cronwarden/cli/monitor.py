"""`cronwarden monitor`: watch the heartbeats and page."""

from __future__ import annotations

from typing import Annotated

import typer

from cronwarden.cli.support import duration_flag, load_settings, out, run_command


def monitor_command(
    once: Annotated[bool, typer.Option("--once", help="Run one pass and exit.")] = False,
    interval: Annotated[
        float,
        typer.Option(
            parser=duration_flag(minimum=0.1),
            metavar="DURATION",
            show_default=False,
            help="Time between two passes: 15s unless given (5s, 1m; a bare number is seconds).",
        ),
    ] = 15.0,
    metrics_port: Annotated[
        int | None,
        typer.Option(
            min=1,
            max=65535,
            help="Serve /metrics, /healthz, /readyz and the status page (/) on this port.",
        ),
    ] = None,
    metrics_host: Annotated[
        str | None,
        typer.Option(help="Address the port binds. Default: every interface."),
    ] = None,
) -> None:
    """Page for schedules that did not run (or run too long). Reads Postgres only."""

    async def go() -> None:
        from cronwarden.monitor.process import run_monitor

        report = await run_monitor(
            load_settings(),
            once=once,
            interval=interval,
            metrics_port=metrics_port,
            metrics_host=metrics_host,
        )
        if once and report is not None:
            # A pass from cron or by hand: say what it found (its log lines are at --log-level).
            out.print(report.summary())

    run_command(go)
