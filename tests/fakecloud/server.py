#!/usr/bin/env python3
"""nodecycle fake cloud launcher.

Starts, in one process:
  * moto (``ThreadedMotoServer``) on 127.0.0.1, a real AWS emulator spoken to
    over HTTP by the real Rust AWS SDK;
  * a small *control* HTTP server that writes fixtures moto cannot create by
    itself straight into moto's backends (see ``aws_fixtures.py``) and manages
    the Kubernetes API server stand-ins (see ``kube.py``).

When ready it prints exactly one JSON line on stdout:
  {"aws": "http://127.0.0.1:P1", "control": "http://127.0.0.1:P2", ...}
and then serves until stdin is closed (the parent died or dropped the pipe) or
SIGTERM/SIGINT arrives.

``server.py --zygote`` instead imports and patches everything once, warms moto
up in-process, listens on a Unix socket and prints ``{"zygote": PATH}``; each
connection to PATH gets a forked fake cloud of its own, which writes its ready
line to the connection and serves until the connection closes. A fork starts
in milliseconds with moto already imported (a fresh launcher spends about 2 s
of CPU importing and warming up), with the state a fresh launcher has after
its warm-up. The zygote serves until its stdin closes.

Control protocol: ``POST /control`` with ``{"op": NAME, "args": {...}}``;
the answer is JSON, ``400 {"error": MESSAGE}`` on failure.
See README.md for the list of operations.
"""

from __future__ import annotations

import json
import os
import signal
import sys
import threading
import time
import traceback
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

_T0 = time.monotonic()
HERE = os.path.dirname(os.path.abspath(__file__))

# Must be set before moto's EC2 models are imported: start with an empty AMI
# set so moto's built-in AMIs never pollute DescribeImages answers.
os.environ.setdefault("MOTO_AMIS_PATH", os.path.join(HERE, "empty_amis.json"))
os.environ.setdefault("MOTO_EC2_LOAD_DEFAULT_AMIS", "false")
# Credentials moto itself never checks, but boto3/botocore (imported by moto)
# must not go looking for real ones.
os.environ.setdefault("AWS_ACCESS_KEY_ID", "testing")
os.environ.setdefault("AWS_SECRET_ACCESS_KEY", "testing")
os.environ.setdefault("AWS_DEFAULT_REGION", "us-east-2")

sys.path.insert(0, HERE)


class ControlError(Exception):
    """A control request the caller got wrong: answered with 400."""


OPS: dict = {}


def op(name):
    def register(fn):
        OPS[name] = fn
        return fn

    return register


def _quiet_logging() -> None:
    import logging

    logging.getLogger("werkzeug").setLevel(logging.ERROR)


class ControlHandler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server_version = "fakecloud-control"

    def log_message(self, format, *args):  # noqa: A002 - stdlib signature
        pass

    def _reply(self, status: int, body: object) -> None:
        data = json.dumps(body).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.send_header("Connection", "close")
        self.end_headers()
        self.wfile.write(data)
        self.close_connection = True

    def do_GET(self):
        if self.path == "/healthz":
            self._reply(200, {"ok": True, "ops": sorted(OPS)})
        else:
            self._reply(404, {"error": f"no such path {self.path}"})

    def do_POST(self):
        if self.path != "/control":
            self._reply(404, {"error": f"no such path {self.path}"})
            return
        try:
            length = int(self.headers.get("Content-Length") or 0)
            raw = self.rfile.read(length) if length else b"{}"
            req = json.loads(raw or b"{}")
            if not isinstance(req, dict) or not isinstance(req.get("op"), str):
                raise ControlError('body must be {"op": NAME, "args": {...}}')
            name = req["op"]
            args = req.get("args") or {}
            if not isinstance(args, dict):
                raise ControlError("args must be a JSON object")
            fn = OPS.get(name)
            if fn is None:
                raise ControlError(f"unknown op {name!r}; known: {', '.join(sorted(OPS))}")
            result = fn(args)
            self._reply(200, {} if result is None else result)
        except ControlError as e:
            self._reply(400, {"error": str(e)})
        except KeyError as e:
            self._reply(400, {"error": f"missing argument {e}"})
        except (ValueError, TypeError) as e:
            self._reply(400, {"error": f"{type(e).__name__}: {e}"})
        except Exception as e:  # a bug in the fake: still answer, with the trace
            self._reply(500, {"error": f"{type(e).__name__}: {e}", "trace": traceback.format_exc()})


PATCHED = threading.Event()


def _gate_moto_requests() -> None:
    """Hold every AWS request until moto is imported and patched; inject the faults
    set with the `faults` op.

    The ready line goes out before EC2 is imported (that takes ~1 s); an AWS
    request arriving in between waits here instead of reaching unpatched moto.
    """
    from moto.moto_server.werkzeug_app import DomainDispatcherApplication

    import accounts
    import cloudwatch_cbor
    import faults

    # Faults (see faults.py) apply at this dispatch layer, so to every AWS operation; CloudWatch
    # over rpc-v2-cbor (which moto does not speak) is served by cloudwatch_cbor.py.
    # accounts.py records who made each call and refuses AssumeRole as IAM does (outermost: a
    # faulted call was still made).
    original = accounts.wrap(faults.wrap_aws(cloudwatch_cbor.wrap(DomainDispatcherApplication.__call__)))

    def gated(self, environ, start_response):
        PATCHED.wait(120)
        return original(self, environ, start_response)

    DomainDispatcherApplication.__call__ = gated


def _patch_then_warm_up(aws_url: str) -> None:
    try:
        import aws_fixtures

        aws_fixtures.import_and_patch()
    except Exception:
        traceback.print_exc()
    finally:
        PATCHED.set()
    _warm_up(aws_url)


def _warm_up(aws_url: str) -> None:
    """Import the moto services the tests use, off the critical path.

    moto imports services lazily on their first request; EC2 alone takes ~1 s.
    Doing it here, after the ready line, overlaps that with the test's own setup.
    """
    try:
        import aws_fixtures

        aws_fixtures.warm_up(aws_url)
    except Exception:  # warm-up is an optimisation only
        traceback.print_exc()


def _register_ops() -> None:
    import aws_fixtures  # registers the AWS control ops

    aws_fixtures.register(op, ControlError)
    import kube  # the Kubernetes API server stand-ins

    kube.register(op, ControlError)
    import faults  # fault injection for AWS and Kubernetes calls

    faults.register(op, ControlError)
    import autoscaler  # the Cluster Autoscaler actor (and Auto Scaling's records)

    autoscaler.register(op, ControlError)
    import accounts  # several accounts: the account of each call, AssumeRole as IAM refuses it

    accounts.register(op, ControlError)


def _serve(aws_url: str, started: float, say_ready, closed) -> None:
    """Starts the control server beside moto at `aws_url`, says the ready line with
    `say_ready(line)`, serves until `closed()` returns (or SIGTERM/SIGINT), then stops the
    stand-ins and exits the process."""
    import aws_fixtures

    control = ThreadingHTTPServer(("127.0.0.1", 0), ControlHandler)
    control.daemon_threads = True
    threading.Thread(target=control.serve_forever, name="control", daemon=True).start()
    control_url = f"http://127.0.0.1:{control.server_address[1]}"

    ready = {
        "aws": aws_url,
        "control": control_url,
        "pid": os.getpid(),
        "account": aws_fixtures.ACCOUNT_ID,
        "region": aws_fixtures.DEFAULT_REGION,
        "startup_ms": round((time.monotonic() - started) * 1000),
    }
    say_ready(json.dumps(ready) + "\n")

    stop = threading.Event()

    def on_signal(signum, frame):
        stop.set()

    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)

    def watch():
        try:
            closed()
        except Exception:
            pass
        stop.set()

    threading.Thread(target=watch, name="liveness", daemon=True).start()
    while not stop.wait(0.2):
        pass
    # Whatever hangs in the clean-up below, the process is gone within 5 s.
    signal.alarm(5)
    try:
        import kube

        kube.shutdown()
    except Exception:
        pass
    sys.stdout.flush()
    sys.stderr.flush()
    # Daemon threads (moto, control, stand-ins) die with the process.
    os._exit(0)


def _stdin_closed() -> None:
    while sys.stdin.buffer.read(4096):
        pass


def main() -> None:
    _quiet_logging()
    from moto.server import ThreadedMotoServer

    _register_ops()
    _gate_moto_requests()
    moto = ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
    moto.start()
    host, port = moto.get_host_and_port()
    aws_url = f"http://{host}:{port}"

    def say_ready(line: str) -> None:
        sys.stdout.write(line)
        sys.stdout.flush()
        threading.Thread(target=_patch_then_warm_up, args=(aws_url,), name="warm-up", daemon=True).start()

    _serve(aws_url, _T0, say_ready, _stdin_closed)


def zygote() -> None:
    """Imports, patches and warms up once, then forks a fake cloud per connection (see the
    module's doc)."""
    import select
    import shutil
    import socket
    import tempfile

    _quiet_logging()
    _register_ops()
    _gate_moto_requests()
    import accounts
    import aws_fixtures
    from moto.moto_server.werkzeug_app import DomainDispatcherApplication, create_backend_app

    import eks_rollout

    # Threads do not survive a fork: the EKS rollout ticker starts in each forked cloud.
    eks_rollout.hold_ticker()
    aws_fixtures.import_and_patch()
    PATCHED.set()
    app = DomainDispatcherApplication(create_backend_app)
    aws_fixtures.warm_up_app(app)
    # A fresh cloud has made no AWS call.
    accounts.clear()
    if threading.active_count() != 1:
        sys.exit(f"fakecloud zygote: threads {[t.name for t in threading.enumerate()]} before forking; refusing to fork")

    folder = tempfile.mkdtemp(prefix="fakecloud-")
    path = os.path.join(folder, "zygote.sock")
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    listener.bind(path)
    listener.listen(64)
    sys.stdout.write(json.dumps({"zygote": path, "pid": os.getpid()}) + "\n")
    sys.stdout.flush()
    # Forked clouds are reaped by the kernel; each restores the default in itself.
    signal.signal(signal.SIGCHLD, signal.SIG_IGN)
    try:
        while True:
            readable, _, _ = select.select([listener, sys.stdin], [], [])
            if sys.stdin in readable and not os.read(sys.stdin.fileno(), 4096):
                break
            if listener not in readable:
                continue
            conn, _ = listener.accept()
            if os.fork() == 0:
                started = time.monotonic()
                listener.close()
                signal.signal(signal.SIGCHLD, signal.SIG_DFL)
                _fork_serves(conn, app, started)
            conn.close()
    finally:
        listener.close()
        shutil.rmtree(folder, ignore_errors=True)
    sys.stdout.flush()
    sys.stderr.flush()
    # Tearing moto's modules down would take seconds; nothing is left to clean up.
    os._exit(0)


def _fork_serves(conn, app, started: float) -> None:
    """A forked fake cloud: moto's warmed-up `app` on a new port, the ready line on `conn`,
    served until `conn` closes."""
    from moto.moto_server.werkzeug_app import MotoRequestHandler
    from werkzeug.serving import make_server

    import eks_rollout

    try:
        eks_rollout.release_ticker()
        server = make_server("127.0.0.1", 0, app, True, request_handler=MotoRequestHandler)
        threading.Thread(target=server.serve_forever, name="moto", daemon=True).start()
        host, port = server.server_address[:2]

        def closed() -> None:
            while conn.recv(4096):
                pass

        _serve(f"http://{host}:{port}", started, lambda line: conn.sendall(line.encode()), closed)
    except BaseException:
        traceback.print_exc()
    os._exit(1)


if __name__ == "__main__":
    if sys.argv[1:] == ["--zygote"]:
        zygote()
    else:
        main()
