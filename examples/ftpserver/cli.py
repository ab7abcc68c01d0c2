"""The command line: its arguments made into a Config, the server started on the loop
asked for, the first line printed, and Ctrl-C and SIGTERM stopping it (exit status 0)."""

from __future__ import annotations

import argparse
import asyncio
import functools
import logging
import os
import signal
import ssl
import sys
from collections.abc import Callable, Sequence

import aiosendfile

from .config import Config, User, number, server_context
from .data import loses_tls_tail
from .server import start_server

log = logging.getLogger("ftp_server")


def port_number(text: str) -> int:
    """--port's type: 0 to 65535 (0: a free one).  Checked here: uvloop would listen on
    99999 - 65536, asyncio raise OverflowError from bind()."""
    port = number(text, 65536)
    if port is None:
        raise argparse.ArgumentTypeError(f"{text!r} is not a port: 0 to 65535 (0: a free one)")
    return port


def parse_arguments(argv: Sequence[str]) -> tuple[Config, str]:
    parser = argparse.ArgumentParser(
        prog="ftp_server.py",
        description="An FTP server on aiosendfile: RETR by sendfile(2), STOR by splice(2).",
    )
    add = parser.add_argument
    add("--root", required=True, help="the directory served ('/' to clients)")
    add("--host", default="127.0.0.1", help="address to listen on (default 127.0.0.1)")
    add("--port", type=port_number, default=2121,
        help="0 to 65535 (default 2121; 0 picks a free port)")  # fmt: skip
    add("--user", action="append", default=[], metavar="NAME:PASSWORD[:rw]",
        help="a login (repeatable); ':rw' gives it write rights")  # fmt: skip
    add("--anonymous", action="store_true", help="allow read-only anonymous logins")
    add("--write", action="store_true", help="give every --user write rights")
    add("--tls-cert", metavar="C", help="certificate chain (PEM): enables AUTH TLS")
    add("--tls-key", metavar="K", help="the certificate's private key (PEM)")
    add("--tls-required", action="store_true", help="refuse logins and data without TLS")
    add("--no-tls-session-reuse", action="store_true",
        help="accept PROT P data connections that do not resume the control connection's "
             "TLS session (Python's ftplib); the client's address alone then ties them to "
             "their session")  # fmt: skip
    add("--active", action="store_true", help="allow PORT and EPRT (client's address only)")
    add("--max-conns-per-ip", type=int, default=10, metavar="N", help="default 10")
    add("--idle-timeout", type=float, default=300.0, metavar="S", help="default 300 s")
    add("--passive-ports", metavar="LOW-HIGH", help="passive port range (default: any)")
    add("--loop", choices=("asyncio", "uvloop"), default="asyncio", help="default asyncio")
    args = parser.parse_args(argv)
    if not os.path.isdir(args.root):
        parser.error(f"not a directory: {args.root}")
    if bool(args.tls_cert) != bool(args.tls_key):
        parser.error("--tls-cert and --tls-key go together")
    if args.tls_required and not args.tls_cert:
        parser.error("--tls-required needs --tls-cert and --tls-key")
    users = {}
    for spec in args.user:
        write = spec.endswith(":rw")
        name, sep, password = spec.removesuffix(":rw" if write else "").partition(":")
        if not name or not sep:
            parser.error(f"--user wants NAME:PASSWORD[:rw], not {spec!r}")
        users[name] = User(password, write or args.write)
    ports = None
    if args.passive_ports:
        low, _, high = args.passive_ports.partition("-")
        if not (low.isdigit() and high.isdigit() and 0 < int(low) <= int(high) < 65536):
            parser.error("--passive-ports wants LOW-HIGH, e.g. 50000-50100")
        ports = range(int(low), int(high) + 1)
    tls = None
    if args.tls_cert:
        tls = functools.partial(server_context, args.tls_cert, args.tls_key)
        try:
            tls()  # loads now: a bad file is told at start, not at the first AUTH TLS
        except (OSError, ssl.SSLError) as exc:
            parser.error(f"cannot load --tls-cert/--tls-key: {exc}")
    config = Config(
        root=os.path.abspath(args.root), host=args.host, port=args.port, users=users,
        anonymous=args.anonymous, tls=tls, tls_required=args.tls_required,
        tls_session_reuse=not args.no_tls_session_reuse, active=args.active,
        max_conns_per_ip=args.max_conns_per_ip, idle_timeout=args.idle_timeout,
        passive_ports=ports,
    )  # fmt: skip
    return config, args.loop


async def serve(config: Config, loop_name: str) -> int:
    """Serves until cancelled (Ctrl-C) or SIGTERM; the exit status."""
    try:
        server = await start_server(config)
    except OSError as exc:  # the port is taken, the address not ours: said in one line
        reason = os.strerror(exc.errno) if exc.errno else str(exc)
        print(f"ftp_server.py: cannot listen on {config.host}:{config.port}: {reason}",
              file=sys.stderr)  # fmt: skip
        return 1
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    loop.add_signal_handler(signal.SIGTERM, stop.set)
    try:
        async with server:
            assert server.server is not None
            host, port = server.server.sockets[0].getsockname()[:2]
            address = f"[{host}]:{port}" if ":" in host else f"{host}:{port}"
            tls = "required" if config.tls_required else "on" if config.tls else "off"
            print(f"FTP server on {address} (root {config.root}, loop {loop_name}, "
                  f"core {aiosendfile.CORE}, TLS {tls})", flush=True)  # fmt: skip
            if config.tls and loses_tls_tail():
                log.info("uvloop: FTPS uploads run on asyncio's TLS protocol: uvloop's loses "
                         "data that arrives with close_notify (uvloop PR #661)")  # fmt: skip
            await stop.wait()
    finally:
        loop.remove_signal_handler(signal.SIGTERM)
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    config, loop_name = parse_arguments(sys.argv[1:] if argv is None else argv)
    logging.basicConfig(level=logging.INFO, format="%(message)s", stream=sys.stderr)
    factory: Callable[[], asyncio.AbstractEventLoop] = asyncio.new_event_loop
    if loop_name == "uvloop":
        import uvloop

        factory = uvloop.new_event_loop
    status = 0
    try:
        with asyncio.Runner(loop_factory=factory) as runner:
            status = runner.run(serve(config, loop_name))
    except KeyboardInterrupt:
        pass  # Ctrl-C: the server and its sessions were closed on the way out
    if status == 0:
        log.info("stopped")
    return status
