#!/usr/bin/env python3
"""Self-check of the launcher's zygote (`server.py --zygote`): each fork is a fake cloud of its
own, as fresh as a launcher started for it, and goes when its connection closes.

    ~/.cache/nodecycle/venv/bin/python tests/fakecloud/check_zygote.py

Exits non-zero on the first failed check.
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import time
import urllib.request

from selfcheck import HERE, REGION, check, wait_for

AUTH = "AWS4-HMAC-SHA256 Credential=testing/20240101/{region}/ec2/aws4_request, SignedHeaders=host, Signature=0"


def alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().split()[2] != "Z"
    except FileNotFoundError:
        return False


class Fork:
    """One cloud forked from the zygote at `path`."""

    def __init__(self, path: str):
        self.connected = time.monotonic()
        self.conn = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.conn.connect(path)
        buf = b""
        while not buf.endswith(b"\n"):
            chunk = self.conn.recv(4096)
            if not chunk:
                raise AssertionError(f"the fork closed before its ready line ({buf!r})")
            buf += chunk
        self.info = json.loads(buf)

    def ctl(self, op, **args):
        req = urllib.request.Request(
            self.info["control"] + "/control", data=json.dumps({"op": op, "args": args}).encode(), method="POST"
        )
        with urllib.request.urlopen(req, timeout=30) as r:
            return json.loads(r.read())

    def own_images(self) -> bytes:
        req = urllib.request.Request(
            self.info["aws"] + "/",
            data=b"Action=DescribeImages&Version=2016-11-15&Owner.1=self",
            headers={"Authorization": AUTH.format(region=REGION), "Content-Type": "application/x-www-form-urlencoded"},
            method="POST",
        )
        with urllib.request.urlopen(req, timeout=30) as r:
            return r.read()


def main() -> None:
    t0 = time.monotonic()
    zygote = subprocess.Popen(
        [sys.executable, os.path.join(HERE, "server.py"), "--zygote"], stdin=subprocess.PIPE, stdout=subprocess.PIPE
    )
    try:
        line = zygote.stdout.readline()
        if not line:
            raise AssertionError("the zygote exited before its ready line")
        path = json.loads(line)["zygote"]
        a, b = Fork(path), Fork(path)
        check(a.info["pid"] != b.info["pid"] and a.info["aws"] != b.info["aws"],
              "each connection gets a cloud of its own (own process, own ports)")
        check(a.ctl("aws_calls")["calls"] == [], "a fork has recorded no AWS call (the zygote's warm-up is forgotten)")
        # Fake EKS seconds cannot run ahead of the real seconds since the fork: the clock restarted.
        now = a.ctl("set_eks_timing")["now"]
        check(now <= time.monotonic() - a.connected + 0.5,
              f"the fork's EKS clock starts at 0, not at the zygote's start ({now:.2f} fake seconds)")
        image = a.ctl("register_image", name="only-in-a")["image_id"]
        check(image.encode() in a.own_images() and image.encode() not in b.own_images(),
              "what one cloud stores, another does not see")
        check(a.ctl("register_image", name="x")["image_id"] != b.ctl("register_image", name="x")["image_id"],
              "ids differ between clouds (random is reseeded in each fork)")
        check([c["operation"] for c in b.ctl("aws_calls")["calls"]] == ["DescribeImages"],
              "a fork records its own calls only")
        a.conn.close()
        wait_for("the fork to stop once its connection closes", lambda: not alive(a.info["pid"]), timeout=10)
        check(True, "a fork stops when its connection closes")
        check(alive(b.info["pid"]) and b.ctl("aws_calls") is not None, "the other fork serves on")
        b.conn.close()
        zygote.stdin.close()
        zygote.wait(10)
        check(zygote.returncode == 0 and not os.path.exists(path), "the zygote stops when its stdin closes, its socket removed")
    except AssertionError as e:
        print(f"FAIL {e}", file=sys.stderr)
        sys.exit(1)
    finally:
        if zygote.poll() is None:
            zygote.kill()
    print(f"all checks passed in {time.monotonic() - t0:.1f}s")


if __name__ == "__main__":
    main()
