#!/usr/bin/env python3
"""Self-check of ec2_index.py, fast_serialize.py and seed_groups (bulk_seed.py): the indexed
fake cloud answers exactly as moto does.

Starts the launcher with FAKECLOUD_INDEX_CHECK=1 (every indexed answer is also computed by
moto's original function on the same state and any difference recorded), builds a fleet
through the API and through seed_groups, then, after each of a series of mutations
(launches, tag writes and deletes, stops, starts, terminations, Auto Scaling scale-out and
scale-in, terminations in the group, deletion), asks the same questions through boto3 with
the indexes on and off (control op ``moto_speedups``) and compares the raw response bodies
(request ids aside), including every page of paginated answers and the errors. Finally it
checks that a group made by seed_groups reads like one made through the API.

    ~/.cache/nodecycle/venv/bin/python tests/fakecloud/check_index.py

Exits non-zero on the first failed check.
"""

from __future__ import annotations

import os
import re

from selfcheck import check, run_main

_REQUEST_ID = re.compile(rb"<(requestId|RequestId|RequestID)>[^<]*</(requestId|RequestId|RequestID)>")


class Recorder:
    """Raw response bodies of a boto3 client's calls (before botocore parses them)."""

    def __init__(self, *clients):
        self.bodies: list = []
        for c in clients:
            c.meta.events.register("before-parse", self.record)

    def record(self, response_dict=None, **_):
        response_dict = response_dict or {}
        body = response_dict.get("body") or b""
        if isinstance(body, str):
            body = body.encode()
        self.bodies.append((response_dict.get("status_code"), _REQUEST_ID.sub(b"", body)))


def answer(rec, fn, kw):
    """Every raw body one question produces: all pages, or the error."""
    from botocore.exceptions import BotoCoreError, ClientError
    from botocore.parsers import ResponseParserError

    rec.bodies.clear()
    kw = dict(kw)
    token_field = kw.pop("_token", None)
    try:
        while True:
            out = fn(**kw)
            token = out.get(token_field) if token_field else None
            if not token:
                break
            kw["NextToken"] = token
    except (ClientError, BotoCoreError, ResponseParserError):  # an error answer (moto's own 500s included) is compared too
        pass
    return list(rec.bodies)


def _pages(ec2, **kw):
    """Every DescribeInstances page of one question."""
    out = []
    while True:
        page = ec2.describe_instances(**kw)
        out.append(page)
        if not page.get("NextToken"):
            return out
        kw["NextToken"] = page["NextToken"]


def _pairs(pages):
    return [(r["ReservationId"], i["InstanceId"]) for p in pages for r in p["Reservations"] for i in r["Instances"]]


def pages_like_ec2(cloud, ec2):
    """instance_pages.py: MaxResults counts instances, a reservation is split over pages,
    no MaxResults is one answer; bad MaxResults and tokens are refused."""
    from selfcheck import error_of

    whole = _pages(ec2)
    check(len(whole) == 1 and "NextToken" not in whole[0], "without MaxResults DescribeInstances is one answer")
    every = _pairs(whole)
    biggest = max(len(r["Instances"]) for r in whole[0]["Reservations"])
    check(biggest > 5, f"the fleet has a reservation of more than 5 instances ({biggest})")
    for filters in ([], [{"Name": "tag:eks:cluster-name", "Values": ["c0"]}],
                    [{"Name": "tag:aws:autoscaling:groupName", "Values": ["bulk-3", "api-a", "bulk-1"]}]):
        expected = _pairs(_pages(ec2, Filters=filters))
        for size in (5, 7, 1000):
            pages = _pages(ec2, Filters=filters, MaxResults=size)
            counts = [sum(len(r["Instances"]) for r in p["Reservations"]) for p in pages]
            check(all(c == size for c in counts[:-1]) and 0 < counts[-1] <= size and _pairs(pages) == expected,
                  f"{filters or 'all'}, MaxResults {size}: pages of {counts} instances, the unpaged answer in order")
    pages = _pages(ec2, MaxResults=5)
    split = {}
    for n, p in enumerate(pages):
        for r in p["Reservations"]:
            split.setdefault(r["ReservationId"], set()).add(n)
    check(any(len(v) > 1 for v in split.values()) and _pairs(pages) == every,
          "a reservation whose instances do not fit is split over consecutive pages under its id")
    codes = [
        error_of(ec2.describe_instances, MaxResults=4)[:2],
        error_of(ec2.describe_instances, MaxResults=1001)[:2],
        error_of(ec2.describe_instances, MaxResults=5, NextToken="bogus")[:2],
        error_of(ec2.describe_instances, MaxResults=5, InstanceIds=[every[0][1]])[:2],
    ]
    check([c for c, _ in codes] == ["InvalidParameterValue"] * 3 + ["InvalidParameterCombination"],
          f"MaxResults outside 5..1000, an unknown token, MaxResults with ids refused: {codes}")


def token_survives_termination(ec2):
    """A NextToken whose last instance was terminated (and no longer matches) still goes on
    after it."""
    running = [{"Name": "instance-state-name", "Values": ["running"]}]
    first = ec2.describe_instances(Filters=running, MaxResults=5)
    before = _pairs(_pages(ec2, Filters=running))
    last = _pairs([first])[-1][1]
    ec2.terminate_instances(InstanceIds=[last])
    rest = _pages(ec2, Filters=running, MaxResults=5, NextToken=first["NextToken"])
    served = set(_pairs([first]))
    # (An Auto Scaling group may have launched a replacement meanwhile: it comes last.)
    expected = [p for p in _pairs(_pages(ec2, Filters=running)) if p not in served]
    check(_pairs(rest) == expected and _pairs(rest)[: len(before) - 5] == before[5:],
          "a token whose instance was terminated between pages goes on after it")


def run(cloud):
    ec2, asg = cloud.ec2, cloud.asg
    rec = Recorder(ec2, asg)
    image = cloud.ctl("register_image", name="golden-1", owner_id="self")["image_id"]
    vpc = ec2.create_vpc(CidrBlock="10.9.0.0/16")["Vpc"]["VpcId"]
    subnet = ec2.create_subnet(VpcId=vpc, CidrBlock="10.9.0.0/17", AvailabilityZone="us-east-2a")["Subnet"]["SubnetId"]

    def api_group(name, cluster, desired):
        ec2.create_launch_template(
            LaunchTemplateName=name, LaunchTemplateData={"ImageId": image, "InstanceType": "m5.large"}
        )
        asg.create_auto_scaling_group(
            AutoScalingGroupName=name,
            LaunchTemplate={"LaunchTemplateName": name, "Version": "$Latest"},
            MinSize=0, MaxSize=desired + 2, DesiredCapacity=desired, VPCZoneIdentifier=subnet,
            Tags=[{"Key": "eks:cluster-name", "Value": cluster, "PropagateAtLaunch": True}],
        )

    api_group("api-a", "c0", 4)
    api_group("api-b", "c1", 3)
    seeded = cloud.ctl("seed_groups", groups=[
        {"name": f"bulk-{i}", "image": image, "desired": 3 + i, "max": 8, "subnet": subnet, "cluster": f"c{i % 2}",
         "tags": {"team": "t" + str(i)}}
        for i in range(4)
    ])
    check(seeded["groups"] == 4 and seeded["instances"] == 3 + 4 + 5 + 6, f"seed_groups made 4 groups, 18 instances: {seeded}")
    ec2.run_instances(
        ImageId=image, MinCount=3, MaxCount=3, InstanceType="m5.large", SubnetId=subnet,
        TagSpecifications=[{"ResourceType": "instance", "Tags": [{"Key": "eks:cluster-name", "Value": "c0"},
                                                                {"Key": "role", "Value": "odd[1]"}]}],
    )
    ec2.run_instances(ImageId=image, MinCount=1, MaxCount=1, InstanceType="m5.large")  # default subnet, untagged

    def ids(**filters):
        out = ec2.describe_instances(
            Filters=[{"Name": k, "Values": v} for k, v in filters.items()], MaxResults=1000
        )
        return [i["InstanceId"] for r in out["Reservations"] for i in r["Instances"]]

    def group_ids(name):
        g = asg.describe_auto_scaling_groups(AutoScalingGroupNames=[name])["AutoScalingGroups"]
        return [i["InstanceId"] for i in g[0]["Instances"]] if g else []

    def questions():
        every = ids()
        a, b, bulk = group_ids("api-a"), group_ids("api-b"), group_ids("bulk-3")
        some = (a[:2] + bulk[-2:] + b[:1])[::-1]
        vols = ec2.describe_volumes(MaxResults=5)["Volumes"]
        one_volume = [vols[0]["VolumeId"]] if vols else []
        f = lambda **kw: [{"Name": k, "Values": v} for k, v in kw.items()]  # noqa: E731
        di = ec2.describe_instances
        return [
            ("all instances, 5 a page", di, {"MaxResults": 5, "_token": "NextToken"}),
            ("all instances", di, {}),
            ("by ids across reservations", di, {"InstanceIds": some}),
            ("one id", di, {"InstanceIds": every[:1]}),
            ("an unknown id", di, {"InstanceIds": every[:1] + ["i-0123456789abcdef0"]}),
            ("ids and a state filter", di, {"InstanceIds": some, "Filters": f(**{"instance-state-name": ["running"]})}),
            ("cluster tag", di, {"Filters": f(**{"tag:eks:cluster-name": ["c0"]})}),
            ("cluster tag, 2 a page", di, {"Filters": f(**{"tag:eks:cluster-name": ["c0"]}), "MaxResults": 5,
                                           "_token": "NextToken"}),
            ("two clusters", di, {"Filters": f(**{"tag:eks:cluster-name": ["c1", "c0"]})}),
            ("a wildcard", di, {"Filters": f(**{"tag:eks:cluster-name": ["c*"]})}),
            ("a character class", di, {"Filters": f(**{"tag:role": ["odd[1]", "odd?1?"]})}),
            ("group tag", di, {"Filters": f(**{"tag:aws:autoscaling:groupName": ["api-a", "bulk-2"]})}),
            ("tag and state", di, {"Filters": f(**{"tag:eks:cluster-name": ["c0"], "instance-state-name": ["stopped"]})}),
            ("tag and type", di, {"Filters": f(**{"tag:team": ["t1", "t3"], "instance-type": ["m5.large"]})}),
            ("tag-key", di, {"Filters": f(**{"tag-key": ["team"]})}),
            ("tag-value", di, {"Filters": f(**{"tag-value": ["c1"]})}),
            ("instance-id filter", di, {"Filters": f(**{"instance-id": some + ["i-0123456789abcdef0"]})}),
            ("instance-id and tag", di, {"Filters": f(**{"instance-id": every, "tag:eks:cluster-name": ["c1"]})}),
            ("a tag no one has", di, {"Filters": f(**{"tag:nobody": ["x"]})}),
            ("status by ids", ec2.describe_instance_status, {"InstanceIds": some, "IncludeAllInstances": True}),
            ("status of running ones", ec2.describe_instance_status, {"InstanceIds": some}),
            ("one volume", ec2.describe_volumes, {"VolumeIds": one_volume}),
            ("one volume and a filter", ec2.describe_volumes, {"VolumeIds": one_volume,
                                                               "Filters": f(**{"status": ["available"]})}),
            ("volumes", ec2.describe_volumes, {}),
            ("tags of some instances", ec2.describe_tags, {"Filters": f(**{"resource-id": some})}),
            ("tags by key", ec2.describe_tags, {"Filters": f(**{"key": ["eks:cluster-name"]})}),
            ("groups by name", asg.describe_auto_scaling_groups, {"AutoScalingGroupNames": ["bulk-1", "api-a"]}),
            ("groups, 2 a page", asg.describe_auto_scaling_groups, {"MaxRecords": 2, "_token": "NextToken"}),
            ("group instances", asg.describe_auto_scaling_instances, {"InstanceIds": a + bulk}),
            ("template versions", ec2.describe_launch_template_versions, {"LaunchTemplateName": "bulk-0"}),
        ]

    # The serializer's fast path serves every service: a few answers of other protocols.
    cloud.ctl("create_cluster", name="prod", version="1.30")
    cloud.ctl("put_parameter", name="/nodecycle/pools/prod/a", value="cluster: prod")
    ssm, eks, ddb, events = (cloud.client(s) for s in ("ssm", "eks", "dynamodb", "events"))
    ddb.create_table(TableName="t", BillingMode="PAY_PER_REQUEST",
                     AttributeDefinitions=[{"AttributeName": "pk", "AttributeType": "S"}],
                     KeySchema=[{"AttributeName": "pk", "KeyType": "HASH"}])
    events.put_rule(Name="r", EventPattern='{"source": ["nodecycle"]}')
    asg.put_lifecycle_hook(LifecycleHookName="drain", AutoScalingGroupName="api-a",
                           LifecycleTransition="autoscaling:EC2_INSTANCE_TERMINATING", HeartbeatTimeout=300)
    for c in (ssm, eks, ddb, events):
        c.meta.events.register("before-parse", rec.record)
    other_services = [
        ("SSM parameters by path", ssm.get_parameters_by_path, {"Path": "/nodecycle/pools/", "Recursive": True}),
        ("EKS cluster", eks.describe_cluster, {"name": "prod"}),
        ("DynamoDB table", ddb.describe_table, {"TableName": "t"}),
        ("EventBridge rule", events.describe_rule, {"Name": "r"}),
        ("lifecycle hooks", asg.describe_lifecycle_hooks, {"AutoScalingGroupName": "api-a"}),
        ("images", ec2.describe_images, {"Owners": ["self"]}),
        ("subnets", ec2.describe_subnets, {}),
    ]

    rounds = [0]

    def compare(step):
        rounds[0] += 1
        qs = questions()
        if rounds[0] == 1:
            # Questions moto answers with a 500 (and a traceback on the launcher's stderr): once.
            every = ids()
            qs += other_services
            qs += [
                ("a duplicated id", ec2.describe_instances, {"InstanceIds": every[:1] * 2}),
                ("an unsupported filter", ec2.describe_instances,
                 {"Filters": [{"Name": "tag:eks:cluster-name", "Values": ["c0"]}, {"Name": "no-such-filter", "Values": ["x"]}]}),
            ]
        for what, fn, kw in qs:
            cloud.ctl("moto_speedups", enabled=True)
            indexed = answer(rec, fn, kw)
            cloud.ctl("moto_speedups", enabled=False)
            moto = answer(rec, fn, kw)
            cloud.ctl("moto_speedups", enabled=True)
            if indexed != moto:
                raise AssertionError(f"after {step}: {what}: indexed answer differs from moto's\n"
                                     f"indexed: {indexed!r:.2000}\nmoto:    {moto!r:.2000}")
        print(f"ok  after {step}: {len(qs)} questions answered alike with and without the indexes")

    compare("seeding")
    pages_like_ec2(cloud, ec2)
    c0 = ids(**{"tag:eks:cluster-name": ["c0"]})
    ec2.create_tags(Resources=c0[:3], Tags=[{"Key": "eks:cluster-name", "Value": "c1"}, {"Key": "team", "Value": "t9"}])
    ec2.create_tags(Resources=c0[10:11], Tags=[{"Key": "note", "Value": "a&b<c>\"d'e\n\tf"}])
    compare("CreateTags (a value changed, a key added, XML's special characters)")
    ec2.delete_tags(Resources=c0[3:5], Tags=[{"Key": "eks:cluster-name"}])
    ec2.delete_tags(Resources=c0[5:7], Tags=[{"Key": "eks:cluster-name", "Value": "c0"}, {"Key": "team", "Value": "no"}])
    compare("DeleteTags (by key, by key and value, a value that does not match)")
    ec2.stop_instances(InstanceIds=c0[7:9])
    compare("StopInstances")
    ec2.start_instances(InstanceIds=c0[7:8])
    ec2.terminate_instances(InstanceIds=c0[9:10])
    compare("StartInstances, TerminateInstances")
    asg.set_desired_capacity(AutoScalingGroupName="api-a", DesiredCapacity=6)
    asg.set_desired_capacity(AutoScalingGroupName="bulk-3", DesiredCapacity=2)
    compare("SetDesiredCapacity out and in")
    asg.terminate_instance_in_auto_scaling_group(InstanceId=group_ids("api-b")[0], ShouldDecrementDesiredCapacity=False)
    asg.terminate_instance_in_auto_scaling_group(InstanceId=group_ids("bulk-1")[0], ShouldDecrementDesiredCapacity=True)
    asg.update_auto_scaling_group(AutoScalingGroupName="bulk-0", DesiredCapacity=5)
    compare("TerminateInstanceInAutoScalingGroup, UpdateAutoScalingGroup")
    asg.delete_auto_scaling_group(AutoScalingGroupName="bulk-2", ForceDelete=True)
    cloud.ctl("seed_groups", groups=[{"name": "bulk-late", "image": image, "desired": 2, "max": 4, "subnet": subnet,
                                      "cluster": "c0"}])
    compare("DeleteAutoScalingGroup, another seed_groups")

    stats = cloud.ctl("moto_speedups")
    check(stats["check"] and stats["checked"] > 0 and stats["indexed"] > 0,
          f"check mode compared indexed answers with moto's: {stats['checked']} compared")
    check(stats["mismatches"] == [], f"no indexed answer differed from moto's own on the same state: {stats['mismatches']}")

    token_survives_termination(ec2)

    # seed_groups makes what the API makes: the same answers but for names, ids, addresses, times.
    api_group("api-twin", "c7", 2)
    cloud.ctl("seed_groups", groups=[{"name": "seed-twin", "image": image, "desired": 2, "max": 4, "subnet": subnet,
                                      "cluster": "c7"}])

    def shape(name):
        g = asg.describe_auto_scaling_groups(AutoScalingGroupNames=[name])["AutoScalingGroups"][0]
        inst = ec2.describe_instances(InstanceIds=[i["InstanceId"] for i in g["Instances"]])
        lt = ec2.describe_launch_template_versions(LaunchTemplateName=name)["LaunchTemplateVersions"]
        other = "seed-twin" if name == "api-twin" else "api-twin"
        text = repr((g, inst["Reservations"], lt)).replace(name, "NAME").replace(other, "NAME")
        for pattern in (r"i-[0-9a-f]{17}", r"r-[0-9a-f]{17}", r"lt-[0-9a-f]{17}", r"vol-[0-9a-f]{17}",
                        r"eni-(attach-)?[0-9a-f]{17}", r"10\.9\.\d+\.\d+", r"ip-10-9-\d+-\d+", r"datetime\.datetime\([^)]*\)",
                        r"\d+\.\d+\.\d+\.\d+", r"[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}",
                        r"'ClientToken': '[^']*'", r"ec2-[0-9-]+\.[a-z0-9.-]+amazonaws\.com", r"'MacAddress': '[^']*'"):
            text = re.sub(pattern, "X", text)
        return text

    api_shape, seed_shape = shape("api-twin"), shape("seed-twin")
    check(api_shape == seed_shape,
          "a group made by seed_groups reads like one made through the API (group, instances, template)"
          + ("" if api_shape == seed_shape else f"\napi:  {api_shape:.3000}\nseed: {seed_shape:.3000}"))

    errors = [
        cloud.ctl_error("seed_groups", groups=[]),
        cloud.ctl_error("seed_groups", groups=[{"name": "x1", "image": "nope"}]),
        cloud.ctl_error("seed_groups", groups=[{"name": "x2", "image": image, "desired": 3, "max": 2}]),
        cloud.ctl_error("seed_groups", groups=[{"name": "api-a", "image": image, "desired": 1}]),
    ]
    check("non-empty list" in errors[0] and "AMI id" in errors[1] and "min <= desired <= max" in errors[2]
          and "api-a" in errors[3], f"seed_groups refuses bad input and says why: {errors}")
    print(f"({rounds[0]} rounds of questions)")


if __name__ == "__main__":
    os.environ["FAKECLOUD_INDEX_CHECK"] = "1"
    run_main(run)
