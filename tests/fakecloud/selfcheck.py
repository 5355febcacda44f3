"""Shared parts of the fakecloud self-checks (check_*.py): start the launcher, talk to it
through boto3 (the AWS wire formats) and urllib (the control ops), and report checks."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
import urllib.error
import urllib.request

HERE = os.path.dirname(os.path.abspath(__file__))
REGION = "us-east-2"


class Cloud:
    """A launcher started for the check; stopped by close()."""

    def __init__(self):
        self.proc = subprocess.Popen(
            [sys.executable, os.path.join(HERE, "server.py")],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
        )
        line = self.proc.stdout.readline()
        if not line:
            raise SystemExit("launcher exited before its ready line")
        self.info = json.loads(line)
        import boto3
        from botocore.config import Config

        kw = dict(
            endpoint_url=self.info["aws"],
            region_name=REGION,
            aws_access_key_id="testing",
            aws_secret_access_key="testing",
            config=Config(retries={"total_max_attempts": 1}),
        )
        self.kw = kw
        self.eks = boto3.client("eks", **kw)
        self.ec2 = boto3.client("ec2", **kw)
        self.asg = boto3.client("autoscaling", **kw)

    def client(self, service, **kw):
        """A boto3 client for `service` (no retries unless `config` says otherwise)."""
        import boto3

        return boto3.client(service, **{**self.kw, **kw})

    def ctl(self, op, **args):
        req = urllib.request.Request(
            self.info["control"] + "/control",
            data=json.dumps({"op": op, "args": args}).encode(),
            headers={"Content-Type": "application/json"},
            method="POST",
        )
        try:
            with urllib.request.urlopen(req, timeout=30) as r:
                return json.loads(r.read())
        except urllib.error.HTTPError as e:
            raise AssertionError(f"control {op} -> {e.code}: {e.read().decode()}")

    def ctl_error(self, op, **args) -> str:
        """The error message of a control op that must fail."""
        try:
            self.ctl(op, **args)
        except AssertionError as e:
            return str(e)
        raise AssertionError(f"control {op} {args} succeeded, expected an error")

    def close(self):
        try:
            self.proc.stdin.close()
            self.proc.wait(10)
        except Exception:
            self.proc.kill()


def check(cond, what):
    if not cond:
        raise AssertionError(what)
    print(f"ok  {what}")


def error_of(fn, **kw):
    """(code, message, http status) of a ClientError, or fail."""
    from botocore.exceptions import ClientError

    try:
        fn(**kw)
    except ClientError as e:
        return e.response["Error"]["Code"], e.response["Error"]["Message"], e.response["ResponseMetadata"]["HTTPStatusCode"]
    raise AssertionError(f"{fn.__name__} {kw} succeeded, expected an error")


def wait_for(what, fn, timeout=30.0, interval=0.05):
    """Poll fn() until it returns a true value (returned); fail after `timeout` seconds
    (a hang guard, not a timing assertion)."""
    deadline = time.monotonic() + timeout
    while True:
        value = fn()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout}s waiting for {what}")
        time.sleep(interval)


def run_main(run):
    """Start the launcher, run(cloud), report; exit 1 on the first failed check."""
    t0 = time.monotonic()
    cloud = Cloud()
    try:
        run(cloud)
    except AssertionError as e:
        print(f"FAIL {e}", file=sys.stderr)
        sys.exit(1)
    finally:
        cloud.close()
    print(f"all checks passed in {time.monotonic() - t0:.1f}s")
