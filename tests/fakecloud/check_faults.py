#!/usr/bin/env python3
"""Self-check of faults.py: starts the fake cloud launcher, sets faults with the control
ops and checks what clients see on the wire (boto3 for AWS, raw HTTPS for the Kubernetes
stand-in): each protocol's throttling and 500/503 error shapes, dropped connections, the
seed's determinism, filters, limits, delays and the counters.

    ~/.cache/nodecycle/venv/bin/python tests/fakecloud/check_faults.py

Exits non-zero on the first failed check.
"""

from __future__ import annotations

import http.client
import json
import ssl
import time

from selfcheck import check, run_main

CLUSTER = "prod"


def aws_error(fn, **kw):
    """(code, HTTP status, headers) of the error a boto3 call meets; ('reset', None, {}) for
    a dropped connection; None when it succeeds."""
    from botocore.exceptions import ClientError, ConnectionClosedError, EndpointConnectionError

    try:
        fn(**kw)
    except ClientError as e:
        meta = e.response["ResponseMetadata"]
        return e.response["Error"]["Code"], meta["HTTPStatusCode"], meta.get("HTTPHeaders", {})
    except (ConnectionClosedError, EndpointConnectionError, ConnectionError) as e:
        return "reset", None, {"error": type(e).__name__}
    return None


def outcomes(fn, n, **kw):
    return [(r[0] if r else None) for r in (aws_error(fn, **kw) for _ in range(n))]


def run(cloud):
    ddb = cloud.client("dynamodb")
    ssm = cloud.client("ssm")
    ec2, asg, eks = cloud.ec2, cloud.asg, cloud.eks
    cloud.ctl("create_cluster", name=CLUSTER, version="1.30")
    ddb.create_table(TableName="t", BillingMode="PAY_PER_REQUEST",
                     AttributeDefinitions=[{"AttributeName": "pk", "AttributeType": "S"}],
                     KeySchema=[{"AttributeName": "pk", "KeyType": "HASH"}])

    # --- throttling, in each protocol's shape ---------------------------------------------
    cloud.ctl("faults", aws={"rate": 1.0, "kinds": ["throttle"]}, seed=1)
    cases = [
        ("awsQuery (Auto Scaling)", asg.describe_auto_scaling_groups, {}, "Throttling", 400),
        ("EC2", ec2.describe_instances, {}, "RequestLimitExceeded", 503),
        ("awsJson 1.0 (DynamoDB item call)", ddb.get_item, {"TableName": "t", "Key": {"pk": {"S": "a"}}},
         "ProvisionedThroughputExceededException", 400),
        ("awsJson 1.0 (DynamoDB table call)", ddb.describe_table, {"TableName": "t"}, "ThrottlingException", 400),
        ("awsJson 1.1 (SSM)", ssm.get_parameter, {"Name": "/x"}, "ThrottlingException", 400),
        ("rest-json (EKS)", eks.describe_cluster, {"name": CLUSTER}, "ThrottlingException", 429),
    ]
    for what, fn, kw, code, status in cases:
        got = aws_error(fn, **kw)
        check(got is not None and got[:2] == (code, status), f"throttle, {what}: HTTP {status} {code} (got {got and got[:2]})")
    got = aws_error(eks.describe_cluster, name=CLUSTER)
    check(got[2].get("x-amzn-errortype") == "ThrottlingException", "EKS throttling carries x-amzn-ErrorType")

    # --- 500 / 503 ------------------------------------------------------------------------
    for kind, expect in (
        ("500", {"Auto Scaling": ("InternalFailure", 500), "EC2": ("InternalError", 500),
                 "DynamoDB": ("InternalServerError", 500), "EKS": ("ServerException", 500)}),
        ("503", {"Auto Scaling": ("ServiceUnavailable", 503), "EC2": ("Unavailable", 503),
                 "DynamoDB": ("ServiceUnavailable", 503), "EKS": ("ServiceUnavailableException", 503)}),
    ):
        cloud.ctl("faults", aws={"rate": 1.0, "kinds": [kind]})
        got = {
            "Auto Scaling": aws_error(asg.describe_auto_scaling_groups),
            "EC2": aws_error(ec2.describe_instances),
            "DynamoDB": aws_error(ddb.describe_table, TableName="t"),
            "EKS": aws_error(eks.describe_cluster, name=CLUSTER),
        }
        check({k: v[:2] for k, v in got.items()} == expect, f"HTTP {kind} in each service's shape: {expect}")

    # --- connection resets --------------------------------------------------------------------
    cloud.ctl("faults", aws={"rate": 1.0, "kinds": ["reset"]})
    check(aws_error(asg.describe_auto_scaling_groups)[0] == "reset" and aws_error(ddb.describe_table, TableName="t")[0] == "reset",
          "reset: the connection drops without an answer")
    cloud.ctl("faults", aws={"rate": 1.0, "kinds": ["reset_after"], "operations": ["PutItem"]})
    got = aws_error(ddb.put_item, TableName="t", Item={"pk": {"S": "after"}})
    cloud.ctl("faults", aws=None)
    item = ddb.get_item(TableName="t", Key={"pk": {"S": "after"}}).get("Item")
    check(got[0] == "reset" and item == {"pk": {"S": "after"}}, "reset_after: the call is carried out, the answer lost")

    # --- rate, seed determinism, filters, limit, stats -------------------------------------
    spec = {"rate": 0.5, "kinds": ["throttle", "500"], "services": ["autoscaling"]}
    cloud.ctl("faults", aws=spec, seed=7)
    first = outcomes(asg.describe_auto_scaling_groups, 40)
    ec2_ok = all(aws_error(ec2.describe_instances) is None for _ in range(5))
    stats = cloud.ctl("fault_stats")["aws"]
    cloud.ctl("faults", aws=spec, seed=7)
    again = outcomes(asg.describe_auto_scaling_groups, 40)
    cloud.ctl("faults", aws=spec, seed=8)
    other = outcomes(asg.describe_auto_scaling_groups, 40)
    failed = sum(1 for o in first if o)
    check(10 <= failed <= 30 and set(first) == {None, "Throttling", "InternalFailure"},
          f"rate 0.5 over 40 calls: {failed} failed, both kinds")
    check(first == again and first != other, "same seed -> same faults; another seed -> others")
    check(ec2_ok, "services filter: EC2 calls untouched")
    per = stats["byOperation"]["autoscaling:DescribeAutoScalingGroups"]
    check(stats["calls"] == 45 and stats["inScope"] == 40 and stats["failed"] == failed == per["failed"]
          and per["calls"] == 40 and sum(stats["byKind"].values()) == failed
          and stats["byOperation"]["ec2:DescribeInstances"]["failed"] == 0,
          f"fault_stats: calls, inScope, failed, byKind, byOperation ({stats['byKind']})")
    cloud.ctl("faults", aws={"rate": 1.0, "kinds": ["throttle"], "operations": ["DescribeTable"], "limit": 2})
    check(outcomes(ddb.describe_table, 3, TableName="t") == ["ThrottlingException", "ThrottlingException", None]
          and aws_error(ddb.get_item, TableName="t", Key={"pk": {"S": "a"}}) is None,
          "operations filter and limit: the first 2 DescribeTable calls fail, then none; GetItem untouched")
    cloud.ctl("faults", aws={"rate": 0.0, "delayMs": 150, "services": ["ssm"]})
    t0 = time.monotonic()
    aws_error(ssm.get_parameter, Name="/x")
    slow = time.monotonic() - t0
    stats = cloud.ctl("fault_stats")["aws"]
    check(slow >= 0.15 and stats["inScope"] == 1 and stats["failed"] == 0, "delayMs 150: the SSM call is held 150 ms")
    check("must be" in cloud.ctl_error("faults", aws={"rate": 2}) and "kinds" in cloud.ctl_error("faults", aws={"kinds": ["boom"]}),
          "bad settings are refused")
    cloud.ctl("faults", aws=None)
    check(aws_error(asg.describe_auto_scaling_groups) is None, "aws: null turns AWS faults off")

    kube_checks(cloud)

    cloud.ctl("faults", aws={"rate": 1.0}, kube={"rate": 1.0})
    cloud.ctl("reset")
    check(cloud.ctl("fault_stats")["aws"]["calls"] == 0 and aws_error(ec2.describe_instances) is None,
          "reset turns the faults off")


def kube_checks(cloud):
    kube = cloud.ctl("create_kube", cluster=CLUSTER)
    token = cloud.ctl("kube_token", cluster=CLUSTER)["token"]
    host, port = kube["endpoint"].removeprefix("https://").split(":")
    ctx = ssl.create_default_context(cafile=kube["caFile"])

    def call(method, path):
        conn = http.client.HTTPSConnection(host, int(port), context=ctx, timeout=10)
        try:
            conn.request(method, path, headers={"Authorization": f"Bearer {token}"})
            r = conn.getresponse()
            return r.status, dict(r.getheaders()), json.loads(r.read() or b"null")
        except (ConnectionError, http.client.RemoteDisconnected, ssl.SSLError) as e:
            return "reset", {}, type(e).__name__
        finally:
            conn.close()

    cloud.ctl("faults", kube={"rate": 1.0, "kinds": ["429"], "retryAfterSeconds": 2}, seed=3)
    status, headers, body = call("GET", "/api/v1/nodes")
    check(status == 429 and headers.get("Retry-After") == "2" and body["reason"] == "TooManyRequests"
          and body["details"]["retryAfterSeconds"] == 2 and body["kind"] == "Status",
          "kube 429: TooManyRequests Status with Retry-After")
    for kind, reason in (("500", "InternalError"), ("503", "ServiceUnavailable")):
        cloud.ctl("faults", kube={"rate": 1.0, "kinds": [kind]})
        status, _, body = call("GET", "/api/v1/pods")
        check(status == int(kind) and body["reason"] == reason and body["code"] == int(kind), f"kube {kind}: {reason} Status")
    cloud.ctl("faults", kube={"rate": 1.0, "kinds": ["reset"], "verbs": ["list"], "resources": ["nodes"]})
    status, _, _ = call("GET", "/api/v1/nodes")
    ok, _, _ = call("GET", "/api/v1/pods")
    check(status == "reset" and ok == 200, "kube reset, filtered by verb and resource: list nodes drops, list pods answers")
    stats = cloud.ctl("fault_stats")["kube"]
    check(stats["byOperation"][f"{CLUSTER}:list nodes"]["byKind"] == {"reset": 1}
          and stats["byOperation"][f"{CLUSTER}:list pods"]["failed"] == 0,
          "kube fault_stats per cluster:verb resource")
    log = cloud.ctl("kube_requests", cluster=CLUSTER)["requests"]
    check(any(r.get("fault") == "reset" and r["status"] == 0 for r in log)
          and any(r.get("fault") == "429" and r["status"] == 429 for r in log),
          "the stand-in's request log marks faulted requests")
    cloud.ctl("faults", kube=None)
    check(call("GET", "/api/v1/nodes")[0] == 200, "kube: null turns Kubernetes faults off")


if __name__ == "__main__":
    run_main(run)
