#!/usr/bin/env python3
"""Self-check of eks_updates.py: starts the fake cloud launcher, drives
UpdateNodegroupConfig / UpdateNodegroupVersion / DescribeUpdate through boto3
(real EKS wire format over HTTP) and the control ops through urllib.

    ~/.cache/nodecycle/venv/bin/python tests/fakecloud/check_eks_updates.py

Exits non-zero on the first failed check.
"""

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
CLUSTER = "prod"


class Cloud:
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
            config=Config(retries={"max_attempts": 1}),
        )
        self.eks = boto3.client("eks", **kw)
        self.ec2 = boto3.client("ec2", **kw)
        self.asg = boto3.client("autoscaling", **kw)

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


def group_images(cloud, asg_name):
    g = cloud.asg.describe_auto_scaling_groups(AutoScalingGroupNames=[asg_name])["AutoScalingGroups"][0]
    ids = [i["InstanceId"] for i in g["Instances"] if i["LifecycleState"] == "InService"]
    if not ids:
        return g, {}
    res = cloud.ec2.describe_instances(InstanceIds=ids)["Reservations"]
    images = {i["InstanceId"]: i["ImageId"] for r in res for i in r["Instances"] if i["State"]["Name"] == "running"}
    return g, images


def main():
    t0 = time.monotonic()
    cloud = Cloud()
    try:
        run(cloud)
    finally:
        cloud.close()
    print(f"all checks passed in {time.monotonic() - t0:.1f}s")


def run(cloud: Cloud):
    eks = cloud.eks
    old = cloud.ctl("register_image", name="amazon-eks-node-al2023-x86_64-standard-1.30-v20240101", owner_id="amazon")["image_id"]
    new = cloud.ctl("register_image", name="amazon-eks-node-al2023-x86_64-standard-1.30-v20240201", owner_id="amazon")["image_id"]
    cloud.ctl("create_cluster", name=CLUSTER, version="1.30")
    kube = cloud.ctl("create_kube", cluster=CLUSTER)
    check(kube["endpoint"].startswith("https://"), "Kubernetes stand-in created")

    # --- create_nodegroup: EKS node group + real backing ASG -----------------
    cloud.ctl("map_release", releaseVersion="1.30.0-20240101", image=old)
    ng = cloud.ctl("create_nodegroup", cluster=CLUSTER, nodegroup="general", releaseVersion="1.30.0-20240101", size=5)
    asg_name = ng["asg"]
    g, images = group_images(cloud, asg_name)
    check(len(images) == 5 and set(images.values()) == {old}, "create_nodegroup: ASG runs 5 instances of the image")
    check(g["LaunchTemplate"]["LaunchTemplateId"] == ng["launchTemplateId"], "ASG launches from the EKS launch template")
    tags = {t["Key"]: t["Value"] for t in g["Tags"]}
    check(
        tags.get("eks:cluster-name") == CLUSTER and tags.get("eks:nodegroup-name") == "general"
        and tags.get(f"kubernetes.io/cluster/{CLUSTER}") == "owned",
        "ASG carries the EKS tags",
    )
    d = eks.describe_nodegroup(clusterName=CLUSTER, nodegroupName="general")["nodegroup"]
    check(d["resources"]["autoScalingGroups"][0]["name"] == asg_name, "DescribeNodegroup names the backing ASG")
    check(
        d["status"] == "ACTIVE" and d["releaseVersion"] == "1.30.0-20240101" and d["version"] == "1.30"
        and d["amiType"] == "AL2023_x86_64_STANDARD" and d["updateConfig"] == {"maxUnavailable": 1}
        and d["scalingConfig"] == {"minSize": 0, "maxSize": 8, "desiredSize": 5},
        "DescribeNodegroup: status, releaseVersion, version, amiType, updateConfig, scalingConfig",
    )
    state = cloud.ctl("kube_state", cluster=CLUSTER)
    check(len(state["nodes"]) == 5, "the stand-in has a node per instance")

    # --- UpdateNodegroupConfig, then UpdateNodegroupVersion -------------------
    cfg = eks.update_nodegroup_config(clusterName=CLUSTER, nodegroupName="general", updateConfig={"maxUnavailable": 2})["update"]
    check(cfg["status"] == "Successful" and cfg["type"] == "ConfigUpdate"
          and cfg["params"] == [{"type": "MaxUnavailable", "value": "2"}], "UpdateNodegroupConfig: Successful, MaxUnavailable param")
    d = eks.describe_nodegroup(clusterName=CLUSTER, nodegroupName="general")["nodegroup"]
    check(d["updateConfig"] == {"maxUnavailable": 2}, "DescribeNodegroup shows the new updateConfig")
    got = eks.describe_update(name=CLUSTER, updateId=cfg["id"], nodegroupName="general")["update"]
    check(got["id"] == cfg["id"] and got["status"] == "Successful", "DescribeUpdate finds the config update")

    code, msg, status = error_of(eks.update_nodegroup_version, clusterName=CLUSTER, nodegroupName="general",
                                 releaseVersion="1.30.9-20991231")
    check(code == "InvalidParameterException" and status == 400 and "not valid for kubernetes version 1.30" in msg,
          f"unknown releaseVersion -> 400 InvalidParameterException ({msg})")
    code, msg, status = error_of(eks.update_nodegroup_version, clusterName=CLUSTER, nodegroupName="general",
                                 releaseVersion="1.30.0-20240101")
    check(code == "InvalidParameterException" and "already at release version" in msg, f"same release -> 400 ({msg})")
    code, _, status = error_of(eks.update_nodegroup_version, clusterName=CLUSTER, nodegroupName="nope",
                               releaseVersion="1.30.0-20240101")
    check(code == "ResourceNotFoundException" and status == 404, "unknown node group -> 404")
    code, _, status = error_of(eks.update_nodegroup_version, clusterName="nope", nodegroupName="general")
    check(code == "ResourceNotFoundException" and status == 404, "unknown cluster -> 404")
    code, msg, _ = error_of(eks.update_nodegroup_version, clusterName=CLUSTER, nodegroupName="general",
                            launchTemplate={"version": "2"})
    check(code == "InvalidParameterException", f"launchTemplate on a node group without one -> 400 ({msg})")

    cloud.ctl("map_release", releaseVersion="1.30.1-20240201", image=new)
    upd = eks.update_nodegroup_version(clusterName=CLUSTER, nodegroupName="general", releaseVersion="1.30.1-20240201",
                                       clientRequestToken="tok-1")["update"]
    check(upd["status"] == "InProgress" and upd["type"] == "VersionUpdate"
          and {"type": "ReleaseVersion", "value": "1.30.1-20240201"} in upd["params"] and upd["errors"] == [],
          "UpdateNodegroupVersion -> InProgress VersionUpdate")
    again = eks.update_nodegroup_version(clusterName=CLUSTER, nodegroupName="general", releaseVersion="1.30.1-20240201",
                                         clientRequestToken="tok-1")["update"]
    check(again["id"] == upd["id"], "same clientRequestToken -> the same update")
    code, msg, status = error_of(eks.update_nodegroup_version, clusterName=CLUSTER, nodegroupName="general",
                                 releaseVersion="1.30.1-20240201", clientRequestToken="tok-2")
    check(code == "ResourceInUseException" and status == 409, f"another update while one runs -> 409 ({msg})")
    code, _, status = error_of(eks.update_nodegroup_config, clusterName=CLUSTER, nodegroupName="general",
                               updateConfig={"maxUnavailable": 3})
    check(code == "ResourceInUseException" and status == 409, "UpdateNodegroupConfig while updating -> 409")
    d = eks.describe_nodegroup(clusterName=CLUSTER, nodegroupName="general")["nodegroup"]
    check(d["status"] == "UPDATING", "node group UPDATING")

    # --- waves ------------------------------------------------------------------
    statuses = []
    for _ in range(10):
        u = eks.describe_update(name=CLUSTER, updateId=upd["id"], nodegroupName="general")["update"]
        statuses.append(u["status"])
        if u["status"] != "InProgress":
            break
    check(statuses == ["InProgress", "InProgress", "InProgress", "Successful"], f"DescribeUpdate statuses {statuses}")
    calls = cloud.ctl("nodegroup_calls", cluster=CLUSTER, nodegroup="general")
    waves = calls["waves"]
    check([len(w["terminated"]) for w in waves] == [2, 2, 1] and all(w["limit"] == 2 for w in waves),
          "waves of at most maxUnavailable=2: 2, 2, 1")
    g, images = group_images(cloud, asg_name)
    check(len(images) == 5 and set(images.values()) == {new} and g["DesiredCapacity"] == 5,
          "every ASG instance on the new image, desired capacity unchanged")
    d = eks.describe_nodegroup(clusterName=CLUSTER, nodegroupName="general")["nodegroup"]
    check(d["status"] == "ACTIVE" and d["releaseVersion"] == "1.30.1-20240201", "node group ACTIVE at the new release")
    state = cloud.ctl("kube_state", cluster=CLUSTER)
    node_ids = sorted(n["spec"]["providerID"].rsplit("/", 1)[-1] for n in state["nodes"])
    check(node_ids == sorted(images), "the stand-in's nodes follow the ASG (old removed, new Ready)")
    check(all(any(c["type"] == "Ready" and c["status"] == "True" for c in n["status"]["conditions"]) for n in state["nodes"]),
          "new nodes Ready")
    ops = [c["op"] for c in calls["calls"]]
    check(ops[0] == "UpdateNodegroupConfig" and ops.count("UpdateNodegroupVersion") == 6 and ops[-1] == "DescribeUpdate",
          f"call log in order: {ops}")
    check(len([u for u in calls["updates"] if u["type"] == "VersionUpdate"]) == 1, "exactly one version update created")
    code, _, status = error_of(eks.describe_update, name=CLUSTER, updateId="00000000-0000-0000-0000-000000000000",
                               nodegroupName="general")
    check(code == "ResourceNotFoundException" and status == 404, "unknown update id -> 404")

    # --- custom launch template node group --------------------------------------
    lt = cloud.ec2.create_launch_template(LaunchTemplateName="custom",
                                          LaunchTemplateData={"ImageId": old, "InstanceType": "m5.xlarge"})["LaunchTemplate"]
    cloud.ec2.create_launch_template_version(LaunchTemplateId=lt["LaunchTemplateId"],
                                             LaunchTemplateData={"ImageId": new, "InstanceType": "m5.xlarge"})
    ng2 = cloud.ctl("create_nodegroup", cluster=CLUSTER, nodegroup="custom", size=3,
                    launchTemplate={"name": "custom", "version": "1"}, maxUnavailablePercentage=50)
    _, images = group_images(cloud, ng2["asg"])
    check(set(images.values()) == {old} and len(images) == 3, "custom LT node group runs the LT's image")
    d = eks.describe_nodegroup(clusterName=CLUSTER, nodegroupName="custom")["nodegroup"]
    check(d["launchTemplate"] == {"name": "custom", "id": lt["LaunchTemplateId"], "version": "1"} and d["amiType"] == "CUSTOM",
          "DescribeNodegroup: launchTemplate {name, id, version}, amiType CUSTOM")
    code, msg, _ = error_of(eks.update_nodegroup_version, clusterName=CLUSTER, nodegroupName="custom",
                            launchTemplate={"name": "custom", "version": "7"})
    check(code == "InvalidParameterException", f"missing LT version -> 400 ({msg})")
    u = eks.update_nodegroup_version(clusterName=CLUSTER, nodegroupName="custom",
                                     launchTemplate={"name": "custom", "version": "2"})["update"]
    check({"type": "LaunchTemplateVersion", "value": "2"} in u["params"], "LT update params")
    statuses = []
    for _ in range(10):
        s = eks.describe_update(name=CLUSTER, updateId=u["id"], nodegroupName="custom")["update"]["status"]
        statuses.append(s)
        if s != "InProgress":
            break
    check(statuses == ["InProgress", "InProgress", "Successful"], f"50% of 3 -> waves of 2: {statuses}")
    _, images = group_images(cloud, ng2["asg"])
    d = eks.describe_nodegroup(clusterName=CLUSTER, nodegroupName="custom")["nodegroup"]
    check(set(images.values()) == {new} and d["launchTemplate"]["version"] == "2" and d["status"] == "ACTIVE",
          "custom LT node group at LT version 2, all instances on its image")

    cfg = eks.update_nodegroup_config(clusterName=CLUSTER, nodegroupName="custom",
                                      scalingConfig={"minSize": 1, "maxSize": 6, "desiredSize": 4})["update"]
    g, images = group_images(cloud, ng2["asg"])
    check(cfg["status"] == "Successful" and g["DesiredCapacity"] == 4 and g["MinSize"] == 1 and g["MaxSize"] == 6
          and len(images) == 4 and set(images.values()) == {new},
          "UpdateNodegroupConfig scalingConfig resizes the backing ASG (from the new LT version)")
    eks.delete_nodegroup(clusterName=CLUSTER, nodegroupName="custom")
    left = cloud.asg.describe_auto_scaling_groups(AutoScalingGroupNames=[ng2["asg"]])["AutoScalingGroups"]
    check(left == [], "DeleteNodegroup deletes the backing ASG")

    # --- fail_update ---------------------------------------------------------------
    newest = cloud.ctl("register_image", name="amazon-eks-node-al2023-x86_64-standard-1.30-v20240301", owner_id="amazon")["image_id"]
    cloud.ctl("map_release", releaseVersion="1.30.2-20240301", image=newest)
    u = eks.update_nodegroup_version(clusterName=CLUSTER, nodegroupName="general")["update"]
    check({"type": "ReleaseVersion", "value": "1.30.2-20240301"} in u["params"], "no releaseVersion -> the latest mapped one")
    eks.describe_update(name=CLUSTER, updateId=u["id"], nodegroupName="general")  # one wave
    armed = cloud.ctl("fail_update", cluster=CLUSTER, nodegroup="general")
    check(armed["updateId"] == u["id"], "fail_update armed on the running update")
    f = eks.describe_update(name=CLUSTER, updateId=u["id"], nodegroupName="general")["update"]
    _, images = group_images(cloud, asg_name)
    still_old = sorted(i for i, img in images.items() if img != newest)
    check(f["status"] == "Failed" and f["errors"][0]["errorCode"] == "PodEvictionFailure"
          and "evict pods" in f["errors"][0]["errorMessage"]
          and sorted(f["errors"][0]["resourceIds"]) == still_old and len(still_old) == 3,
          "fail_update -> Failed, PodEvictionFailure, resourceIds = instances on the old image")
    d = eks.describe_nodegroup(clusterName=CLUSTER, nodegroupName="general")["nodegroup"]
    check(d["status"] == "ACTIVE" and d["releaseVersion"] == "1.30.1-20240201", "after failure: ACTIVE, release unchanged")
    again = eks.describe_update(name=CLUSTER, updateId=u["id"], nodegroupName="general")["update"]
    check(again["status"] == "Failed", "a failed update stays Failed")

    # --- reset -----------------------------------------------------------------------
    cloud.ctl("reset")
    calls = cloud.ctl("nodegroup_calls", cluster=CLUSTER, nodegroup="general")
    check(calls == {"calls": [], "updates": [], "waves": []}, "reset clears calls, updates, waves")
    check(cloud.asg.describe_auto_scaling_groups()["AutoScalingGroups"] == [], "reset clears the ASGs")
    code, _, _ = error_of(eks.describe_update, name=CLUSTER, updateId=u["id"], nodegroupName="general")
    check(code == "ResourceNotFoundException", "reset clears EKS")
    cloud.ctl("create_cluster", name=CLUSTER, version="1.30")
    err = cloud.ctl_error("create_nodegroup", cluster=CLUSTER, nodegroup="general", releaseVersion="1.30.1-20240201")
    check("map_release" in err, "reset clears release mappings")


if __name__ == "__main__":
    try:
        main()
    except AssertionError as e:
        print(f"FAIL {e}", file=sys.stderr)
        sys.exit(1)
