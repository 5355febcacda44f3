"""The figures of docs/development.md: per function binary, init time (process start to its first
`GET /runtime/invocation/next`), time to handle a typical event cold (first invocation of the
process) and warm (the following ones), and peak RSS (VmHWM); artefact sizes; what weighs what.

The binaries run as Lambda runs them: under a Lambda Runtime API emulator (the 2018-06-01
interface: long-poll `next` with the request id, deadline and function ARN headers, `/response`,
`/error`, `/init/error`), with the environment template.yaml gives each function, against the
fake cloud (tests/fakecloud/server.py: moto and the Kubernetes API stand-ins) seeded as
`scripts/demo.sh` seeds it (scripts/demo_seed.py: two clusters, four pools, 19 nodes).
`scripts/figures.sh` builds the binaries and runs this; see docs/development.md, Figures.

Usage: figures.py measure --bin-dir DIR [--runs N] [--warm N]   (DIR/<binary>/bootstrap)
       figures.py sizes --zip-dir DIR                             (DIR/<binary>/bootstrap.zip)
       figures.py crates BINARY [--top N]                         (an unstripped binary)
       figures.py cost --pools N --pass-seconds S --read-units R --write-units W [...]
"""

import argparse
import collections
import json
import os
import re
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import uuid
import zipfile
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import yaml

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "scripts"))

TABLE = "nodecycle-figures"
# Template resource -> the event a typical invocation gets (see `events_for`).
FUNCTIONS = ["AmiWatcherFunction", "RotatorFunction", "InterruptionHandlerFunction", "OpsFunction"]
BINARIES = ["ami-watcher", "rotator", "interruption-handler", "ops"]
# Zipped arm64 sizes before the size work (opt-level 3, thin LTO, stripped; `sam build`), bytes
# rounded as docs/development.md records them: MB.
BEFORE_ZIP_MB = {"ami-watcher": 5.3, "rotator": 7.4, "interruption-handler": 6.6, "ops": 7.4}


# --- Lambda Runtime API emulator -------------------------------------------------------------


class RuntimeApi:
    """One function's Runtime API. Times are `time.monotonic_ns()` of this process."""

    def __init__(self):
        self.cond = threading.Condition()
        self.queue = collections.deque()
        self.outcomes = {}
        self.sent = {}
        self.first_next = None
        self.init_error = None
        api = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args):
                pass

            def _body(self):
                if "chunked" in (self.headers.get("Transfer-Encoding") or "").lower():
                    out = b""
                    while True:
                        size = int(self.rfile.readline().split(b";")[0].strip() or b"0", 16)
                        if size == 0:
                            self.rfile.readline()
                            return out
                        out += self.rfile.read(size)
                        self.rfile.readline()
                return self.rfile.read(int(self.headers.get("Content-Length") or 0))

            def _reply(self, status, body, headers=()):
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(body)))
                for k, v in headers:
                    self.send_header(k, v)
                self.end_headers()
                self.wfile.write(body)
                self.wfile.flush()

            def do_GET(self):
                if not self.path.endswith("/runtime/invocation/next"):
                    return self._reply(404, b"{}")
                with api.cond:
                    if api.first_next is None:
                        api.first_next = time.monotonic_ns()
                        api.cond.notify_all()
                    while not api.queue:
                        api.cond.wait()
                    rid, body, deadline_ms = api.queue.popleft()
                headers = [
                    ("Lambda-Runtime-Aws-Request-Id", rid),
                    ("Lambda-Runtime-Deadline-Ms", str(deadline_ms)),
                    ("Lambda-Runtime-Invoked-Function-Arn", "arn:aws:lambda:us-east-2:123456789012:function:nodecycle-figures"),
                    ("Lambda-Runtime-Trace-Id", "Root=1-00000000-000000000000000000000000;Sampled=0"),
                ]
                self._reply(200, body, headers)
                with api.cond:
                    api.sent[rid] = time.monotonic_ns()

            def do_POST(self):
                body = self._body()
                at = time.monotonic_ns()
                parts = self.path.split("/runtime/", 1)[-1].split("/")
                with api.cond:
                    if parts == ["init", "error"]:
                        api.init_error = body.decode(errors="replace")
                    elif len(parts) == 3 and parts[0] == "invocation" and parts[2] in ("response", "error"):
                        api.outcomes[parts[1]] = (parts[2], body.decode(errors="replace"), at)
                    else:
                        self._reply(404, b"{}")
                        return
                    api.cond.notify_all()
                self._reply(202, b'{"status":"OK"}')

        class Server(ThreadingHTTPServer):
            daemon_threads = True

            def handle_error(self, request, client_address):
                pass  # a connection of a process this script killed

        self.server = Server(("127.0.0.1", 0), Handler)
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def addr(self):
        host, port = self.server.server_address[:2]
        return f"{host}:{port}"

    def wait_first_next(self, proc, timeout):
        until = time.monotonic() + timeout
        with self.cond:
            while self.first_next is None and self.init_error is None:
                left = until - time.monotonic()
                if left <= 0 or proc.poll() is not None:
                    break
                self.cond.wait(min(left, 0.05))
            return self.first_next

    def invoke(self, event, timeout_s, wait_s):
        """(kind, body, handle ms): from the event written to the function to its answer read."""
        rid = str(uuid.uuid4())
        deadline_ms = int(time.time() * 1000) + int(timeout_s * 1000)
        until = time.monotonic() + wait_s
        with self.cond:
            self.queue.append((rid, json.dumps(event).encode(), deadline_ms))
            self.cond.notify_all()
            while rid not in self.outcomes or rid not in self.sent:
                left = until - time.monotonic()
                if left <= 0:
                    raise SystemExit(f"no answer within {wait_s} s to {json.dumps(event)[:200]}")
                self.cond.wait(left)
            kind, body, at = self.outcomes.pop(rid)
            return kind, body, (at - self.sent.pop(rid)) / 1e6

    def close(self):
        self.server.shutdown()
        with self.cond:
            # Release a long poll still waiting, so its thread ends.
            self.queue.append(("00000000-0000-0000-0000-000000000000", b"{}", 0))
            self.cond.notify_all()


# --- template.yaml ---------------------------------------------------------------------------


class Tagged:
    def __init__(self, tag, value):
        self.tag, self.value = tag, value


def load_template():
    class Loader(yaml.SafeLoader):
        pass

    def tagged(loader, suffix, node):
        if isinstance(node, yaml.ScalarNode):
            value = loader.construct_scalar(node)
        elif isinstance(node, yaml.SequenceNode):
            value = loader.construct_sequence(node, deep=True)
        else:
            value = loader.construct_mapping(node, deep=True)
        return Tagged(suffix, value)

    Loader.add_multi_constructor("!", tagged)
    with open(os.path.join(ROOT, "template.yaml")) as f:
        return yaml.load(f, Loader=Loader)


def resolve(t, v):
    """A value as the stack would resolve it here: the state table is ours, a parameter is its
    default."""
    if isinstance(v, (str, int, float)):
        return str(v)
    if isinstance(v, Tagged) and v.tag == "Ref":
        if v.value == "StateTable":
            return TABLE
        param = t["Parameters"].get(v.value)
        if param is not None and "Default" in param:
            return str(param["Default"])
    raise SystemExit(f"template.yaml: cannot resolve {getattr(v, 'tag', '')} {getattr(v, 'value', v)!r} for the figures")


def function_spec(t, resource):
    """(binary, environment, MemorySize, Timeout) of `resource` as template.yaml declares it."""
    f = t["Resources"][resource]
    props, glob = f["Properties"], t["Globals"]["Function"]
    env = {}
    for variables in (glob.get("Environment", {}).get("Variables", {}), props.get("Environment", {}).get("Variables", {})):
        for k, v in variables.items():
            env[k] = resolve(t, v)
    memory = int(resolve(t, props.get("MemorySize", glob.get("MemorySize"))))
    timeout = int(resolve(t, props.get("Timeout", glob.get("Timeout", 3))))
    env["AWS_LAMBDA_FUNCTION_MEMORY_SIZE"] = str(memory)
    env["AWS_LAMBDA_LOG_LEVEL"] = resolve(t, glob["LoggingConfig"]["ApplicationLogLevel"])
    return f["Metadata"]["BuildProperties"]["Binary"], env, memory, timeout


# --- the fake cloud ----------------------------------------------------------------------------


class FakeCloud:
    """tests/fakecloud/server.py, seeded as the demo seeds it; serves until `close`."""

    def __init__(self):
        self.log = tempfile.NamedTemporaryFile(prefix="nodecycle-figures-fakecloud-", suffix=".log", delete=False)
        self.proc = subprocess.Popen(
            [sys.executable, os.path.join(ROOT, "tests", "fakecloud", "server.py")],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=self.log,
        )
        line = self.proc.stdout.readline()
        if not line.strip():
            raise SystemExit(f"the fake cloud did not start; see {self.log.name}")
        ready = json.loads(line)
        self.env = {
            "AWS_ENDPOINT_URL": ready["aws"],
            "AWS_REGION": "us-east-2",
            "AWS_DEFAULT_REGION": "us-east-2",
            "AWS_ACCESS_KEY_ID": "testing",
            "AWS_SECRET_ACCESS_KEY": "testing",
            "AWS_EC2_METADATA_DISABLED": "true",
        }
        os.environ.update(self.env)
        os.environ.pop("AWS_PROFILE", None)
        os.environ.pop("AWS_SESSION_TOKEN", None)
        os.environ["NODECYCLE_CONTROL"] = ready["control"]
        os.environ["NODECYCLE_TABLE"] = TABLE

    def seed(self):
        import contextlib
        import io

        import demo_seed

        with contextlib.redirect_stdout(io.StringIO()):
            demo_seed.seed()

    def instances(self):
        import boto3

        groups = boto3.client("autoscaling").describe_auto_scaling_groups()["AutoScalingGroups"]
        return sorted(i["InstanceId"] for g in groups for i in g["Instances"] if i["LifecycleState"] == "InService")

    def close(self):
        self.proc.stdin.close()
        try:
            self.proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()


def event_file(name):
    with open(os.path.join(ROOT, "events", name)) as f:
        return json.load(f)


def events_for(resource, cloud, count, used):
    """`count` typical events for `resource`: the schedule tick its rule delivers (ami-watcher,
    rotator), a Spot interruption warning for a node of a seeded group (a different instance each
    time: 19 of them, enough for the default 4 runs of 4 invocations), `status` for ops."""
    if resource in ("AmiWatcherFunction", "RotatorFunction"):
        return [event_file("scheduled-tick.json") for _ in range(count)]
    if resource == "OpsFunction":
        return [{"action": "status"} for _ in range(count)]
    out, instances = [], cloud.instances()
    for _ in range(count):
        fresh = [i for i in instances if i not in used] or instances
        instance = fresh[0]
        used.add(instance)
        e = event_file("spot-interruption-warning.json")
        e["id"] = str(uuid.uuid4())
        e["detail"]["instance-id"] = instance
        e["resources"] = [f"arn:aws:ec2:us-east-2:123456789012:instance/{instance}"]
        out.append(e)
    return out


# --- measure -----------------------------------------------------------------------------------


def vm_hwm_kb(pid):
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmHWM:"):
                return int(line.split()[1])
    raise SystemExit(f"no VmHWM for pid {pid}")


def one_process(binary_path, binary, env, events, timeout):
    """Starts the binary under a fresh Runtime API, sends `events`; (init ms, [handle ms], VmHWM kB)."""
    api = RuntimeApi()
    full_env = {k: v for k, v in os.environ.items() if not k.startswith("AWS_LAMBDA_")}
    full_env.update(env)
    full_env.update(
        {
            "AWS_LAMBDA_RUNTIME_API": api.addr(),
            "AWS_LAMBDA_FUNCTION_NAME": f"nodecycle-{binary}",
            "AWS_LAMBDA_FUNCTION_VERSION": "$LATEST",
            "AWS_LAMBDA_LOG_GROUP_NAME": f"/aws/lambda/{binary}",
            "AWS_LAMBDA_LOG_STREAM_NAME": "2026/11/30/[$LATEST]0",
        }
    )
    log = tempfile.NamedTemporaryFile(prefix=f"nodecycle-figures-{binary}-", suffix=".log", delete=False)
    started = time.monotonic_ns()
    proc = subprocess.Popen([binary_path], env=full_env, stdout=subprocess.DEVNULL, stderr=log)
    try:
        first = api.wait_first_next(proc, 60)
        if first is None:
            raise SystemExit(f"{binary}: no `next` request (init error {api.init_error!r}); log in {log.name}")
        handles = []
        for event in events:
            kind, body, ms = api.invoke(event, timeout, timeout + 30)
            if kind != "response":
                raise SystemExit(f"{binary}: error invocation {body}; log in {log.name}")
            handles.append(ms)
        hwm = vm_hwm_kb(proc.pid)
    finally:
        proc.kill()
        proc.wait()
        api.close()
    os.unlink(log.name)
    return (first - started) / 1e6, handles, hwm


def measure(args):
    t = load_template()
    cloud = FakeCloud()
    try:
        cloud.seed()
        rows, used = [], set()
        for resource in FUNCTIONS:
            binary, env, memory, timeout = function_spec(t, resource)
            if args.only and binary not in args.only:
                continue
            path = os.path.join(args.bin_dir, binary, "bootstrap")
            if not os.access(path, os.X_OK):
                raise SystemExit(f"{path} missing: build it first (scripts/figures.sh --build)")
            inits, colds, warms, hwms = [], [], [], []
            for _ in range(args.runs):
                events = events_for(resource, cloud, 1 + args.warm, used)
                init, handles, hwm = one_process(path, binary, {**cloud.env, **env}, events, timeout)
                inits.append(init)
                colds.append(handles[0])
                warms.extend(handles[1:])
                hwms.append(hwm)
            peak_mb = max(hwms) / 1024
            rows.append((binary, inits, colds, warms, peak_mb, memory))
    finally:
        cloud.close()

    def cell(values):
        return f"{statistics.median(values):.0f} ({min(values):.0f}-{max(values):.0f})"

    print(f"{args.runs} processes per function, each: 1 cold + {args.warm} warm invocations; median (min-max) in ms")
    print()
    print("| function | init | cold handle | warm handle | peak RSS | MemorySize | headroom |")
    print("|---|---:|---:|---:|---:|---:|---:|")
    for binary, inits, colds, warms, peak_mb, memory in rows:
        print(
            f"| {binary} | {cell(inits)} | {cell(colds)} | {cell(warms) if warms else '-'} |"
            f" {peak_mb:.1f} MiB | {memory} MB | {memory / peak_mb:.1f}x |"
        )


# --- sizes -------------------------------------------------------------------------------------


def sizes(args):
    print("| function | zip (bytes) | zip (MB) | before (MB) | unzipped bootstrap (MB) | under 4 MB |")
    print("|---|---:|---:|---:|---:|---|")
    for binary in BINARIES:
        if args.only and binary not in args.only:
            continue
        path = os.path.join(args.zip_dir, binary, "bootstrap.zip")
        if not os.path.exists(path):
            raise SystemExit(f"{path} missing: build it first (scripts/figures.sh --build)")
        zipped = os.path.getsize(path)
        with zipfile.ZipFile(path) as z:
            unzipped = sum(i.file_size for i in z.infolist())
        print(
            f"| {binary} | {zipped:,} | {zipped / 1e6:.2f} | {BEFORE_ZIP_MB[binary]} | {unzipped / 1e6:.1f} |"
            f" {'yes' if zipped < 4_000_000 else 'no'} |"
        )


# --- crates ------------------------------------------------------------------------------------


def crate_of(symbol):
    """The crate a demangled symbol belongs to (the type's crate for `<T as Trait>::f`), or a
    bucket for C symbols."""
    s = symbol
    for wrapper in ("core::ptr::drop_in_place<", "<core::pin::Pin<", "core::ptr::drop_in_place::<"):
        s = s.removeprefix(wrapper)  # a drop or poll glue belongs to the type it drops
    s = s.lstrip("<&*").removeprefix("mut ").removeprefix("dyn ").removeprefix("[")
    if s.startswith("T as ") or s.startswith("F as "):
        return "(blanket impls)"
    if "::" in s:
        head = re.split(r"::|<| as |>", s, maxsplit=1)[0]
        return head or "?"
    if s.startswith("anon."):
        return "(anonymous constants)"
    # aws-lc-sys's C and assembly (aws_lc_*, chacha20_*, fiat_p256_*, kObjects, ...), libc stubs.
    return "C (mostly aws-lc)"


def crates(args):
    out = subprocess.run(
        ["nm", "--print-size", "--size-sort", "--defined-only", "--demangle", args.binary],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    weight = collections.Counter()
    for line in out.splitlines():
        parts = line.split(maxsplit=3)
        if len(parts) < 4 or parts[2].lower() not in ("t", "r", "d", "b", "w", "v"):
            continue
        weight[crate_of(parts[3])] += int(parts[1], 16)
    total = sum(weight.values())
    print(f"{args.binary}: {os.path.getsize(args.binary) / 1e6:.1f} MB on disk, {total / 1e6:.1f} MB in named symbols")
    print()
    print("| crate | MB | share |")
    print("|---|---:|---:|")
    for name, size in weight.most_common(args.top):
        print(f"| {name} | {size / 1e6:.2f} | {100 * size / total:.0f}% |")


# --- cost --------------------------------------------------------------------------------------

# us-east-1 list prices (December 2026 page values; arm64 Lambda, DynamoDB on-demand).
LAMBDA_GB_SECOND_ARM = 0.0000133334
LAMBDA_REQUEST = 0.20 / 1e6
DYNAMODB_READ_UNIT = 0.125 / 1e6  # on-demand read request unit (4 KB strongly consistent)
DYNAMODB_WRITE_UNIT = 0.625 / 1e6  # on-demand write request unit (1 KB)
EVENTBRIDGE_CUSTOM_EVENT = 1.00 / 1e6  # PutEvents, per 64 KB event
CLOUDWATCH_METRIC_MONTH = 0.30  # per custom metric series a month (first 10,000; prorated hourly)
CLOUDWATCH_ALARM_MONTH = 0.10  # standard-resolution alarm on one metric
CLOUDWATCH_DASHBOARD_MONTH = 3.00  # beyond the account's first three
CLOUDWATCH_LOG_GB = 0.50  # ingestion (standard log class); storage $0.03 per GB-month not counted
# A controller in the cluster instead: its share of a node (0.25 vCPU, 256 MiB requested on an
# m7g.large, $0.0816 an hour for 2 vCPU / 8 GiB: the larger share, CPU, is priced), always on.
M7G_LARGE_HOUR = 0.0816
MINUTES_A_MONTH = 30 * 24 * 60


def cost(args):
    """Monthly cost of a deployment from one measured steady rotator pass and ami-watcher run
    (durations, the DynamoDB request units they used) and the fixed schedule: the rotator every
    minute, the ami-watcher every 15 minutes, the interruption handler's maintenance tick every
    minute. No free tier. CloudWatch: the metric series (measured by the metrics module's
    simulated day), the stack's alarms and dashboard, and log ingestion (the EMF documents, and
    the INFO decision lines at --log-bytes per pool and pass)."""
    gb = args.memory_mb / 1024
    rotator_s = args.pass_seconds * MINUTES_A_MONTH
    watcher_s = args.watcher_seconds * MINUTES_A_MONTH / 15
    handler_s = args.handler_seconds * MINUTES_A_MONTH
    gb_seconds = (rotator_s + watcher_s) * gb + handler_s * (512 / 1024)
    requests = MINUTES_A_MONTH * 2 + MINUTES_A_MONTH / 15
    lambda_cost = gb_seconds * LAMBDA_GB_SECOND_ARM + requests * LAMBDA_REQUEST
    watcher_runs = MINUTES_A_MONTH / 15
    reads = args.read_units * MINUTES_A_MONTH + args.watcher_read_units * watcher_runs
    writes = args.write_units * MINUTES_A_MONTH + args.watcher_write_units * watcher_runs
    dynamodb = reads * DYNAMODB_READ_UNIT + writes * DYNAMODB_WRITE_UNIT
    events = args.events * EVENTBRIDGE_CUSTOM_EVENT
    log_gb = (args.emf_mb_per_day * 30 * 1e6 + args.log_bytes * args.pools * MINUTES_A_MONTH) / 1e9
    cloudwatch = (args.metric_series * CLOUDWATCH_METRIC_MONTH + args.alarms * CLOUDWATCH_ALARM_MONTH
                  + args.dashboards * CLOUDWATCH_DASHBOARD_MONTH + log_gb * CLOUDWATCH_LOG_GB)
    total = lambda_cost + dynamodb + events + cloudwatch
    controller = 0.25 / 2 * M7G_LARGE_HOUR * 24 * 30 * args.controllers
    print(f"| {args.pools} pools | {gb_seconds:,.0f} GB-s, {requests:,.0f} requests: ${lambda_cost:.2f} |"
          f" {reads / 1e6:.1f} M reads, {writes / 1e6:.2f} M writes: ${dynamodb:.2f} |"
          f" {args.events:,} events: ${events:.2f} |"
          f" {args.metric_series} metrics, {args.alarms} alarms, {args.dashboards} dashboard, {log_gb:.1f} GB logs: ${cloudwatch:.2f} |"
          f" **${total:.2f}** | ${controller:.2f} ({args.controllers} cluster{'s' if args.controllers != 1 else ''}) |")


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = p.add_subparsers(dest="cmd", required=True)
    m = sub.add_parser("measure")
    m.add_argument("--bin-dir", required=True)
    m.add_argument("--runs", type=int, default=4)
    m.add_argument("--warm", type=int, default=3)
    m.add_argument("--only", action="append", help="measure only this binary (repeatable)")
    s = sub.add_parser("sizes")
    s.add_argument("--zip-dir", required=True)
    s.add_argument("--only", action="append", help="only this binary (repeatable)")
    c = sub.add_parser("crates")
    c.add_argument("binary")
    c.add_argument("--top", type=int, default=20)
    k = sub.add_parser("cost")
    k.add_argument("--pools", type=int, required=True)
    k.add_argument("--pass-seconds", type=float, required=True, help="one steady rotator pass")
    k.add_argument("--memory-mb", type=int, default=256, help="the rotator's and ami-watcher's MemorySize")
    k.add_argument("--watcher-seconds", type=float, default=1.0, help="one ami-watcher run")
    k.add_argument("--handler-seconds", type=float, default=0.1, help="one maintenance tick of the interruption handler")
    k.add_argument("--read-units", type=float, required=True, help="DynamoDB read units of one steady pass")
    k.add_argument("--write-units", type=float, required=True, help="DynamoDB write units of one steady pass")
    k.add_argument("--watcher-read-units", type=float, default=0, help="DynamoDB read units of one ami-watcher run")
    k.add_argument("--watcher-write-units", type=float, default=0, help="DynamoDB write units of one ami-watcher run")
    k.add_argument("--events", type=int, default=0, help="custom events put on the bus in a month")
    k.add_argument("--metric-series", type=int, default=20, help="custom metric series the cell emits (metrics::CELL_SERIES, plus those of perPool pools)")
    k.add_argument("--alarms", type=int, default=12, help="the stack's alarms (14 with FanOut)")
    k.add_argument("--dashboards", type=int, default=1, help="0 with Dashboard=Disabled or within the account's first three")
    k.add_argument("--emf-mb-per-day", type=float, default=2.1, help="EMF documents a day (the metrics module's simulated day)")
    k.add_argument("--log-bytes", type=float, default=0, help="INFO log bytes per pool and rotator pass")
    k.add_argument("--controllers", type=int, default=1, help="clusters an in-cluster controller would run in")
    args = p.parse_args()
    {"measure": measure, "sizes": sizes, "crates": crates, "cost": cost}[args.cmd](args)


if __name__ == "__main__":
    main()
