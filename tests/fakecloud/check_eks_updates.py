#!/usr/bin/env python3
"""Self-check of eks_updates.py: starts the fake cloud launcher, drives
UpdateNodegroupConfig / UpdateNodegroupVersion / DescribeUpdate through boto3
(real EKS wire format over HTTP) and the control ops through urllib.

    ~/.cache/nodecycle/venv/bin/python tests/fakecloud/check_eks_updates.py

Exits non-zero on the first failed check.
"""

from __future__ import annotations

from selfcheck import Cloud, check, error_of, run_main, wait_for

CLUSTER = "prod"


def group_images(cloud, asg_name):
    g = cloud.asg.describe_auto_scaling_groups(AutoScalingGroupNames=[asg_name])["AutoScalingGroups"][0]
    ids = [i["InstanceId"] for i in g["Instances"] if i["LifecycleState"] == "InService"]
    if not ids:
        return g, {}
    res = cloud.ec2.describe_instances(InstanceIds=ids)["Reservations"]
    images = {i["InstanceId"]: i["ImageId"] for r in res for i in r["Instances"] if i["State"]["Name"] == "running"}
    return g, images


def wait_update(cloud, nodegroup, update_id, timeout=30.0):
    """DescribeUpdate until the update is no longer InProgress (bounded: a hang guard)."""

    def done():
        u = cloud.eks.describe_update(name=CLUSTER, updateId=update_id, nodegroupName=nodegroup)["update"]
        return u if u["status"] != "InProgress" else None

    return wait_for(f"update {update_id} of {nodegroup} to end", done, timeout)


def events(cloud, nodegroup, update_id=None):
    calls = cloud.ctl("nodegroup_calls", cluster=CLUSTER, nodegroup=nodegroup)
    return [e for e in calls["timeline"] if update_id is None or e["updateId"] == update_id]


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
    # Fake time stopped: the update must not move however often it is described.
    timing = cloud.ctl("set_eks_timing", paused=True)
    check(timing["paused"] and timing["waveSeconds"] > 0, "set_eks_timing pauses fake time")
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

    # --- DescribeUpdate reads; fake time moves the rollout ----------------------------
    _, before = group_images(cloud, asg_name)
    for _ in range(10):
        u = eks.describe_update(name=CLUSTER, updateId=upd["id"], nodegroupName="general")["update"]
    _, after = group_images(cloud, asg_name)
    check(u["status"] == "InProgress" and events(cloud, "general") == [] and after == before,
          "10 DescribeUpdate calls with fake time paused: nothing moved")
    cloud.ctl("advance_eks_time", seconds=0.01)
    kinds = [e["event"] for e in events(cloud, "general")]
    g, images = group_images(cloud, asg_name)
    check(kinds[:2] == ["setup", "scaleUp"] and "terminate" not in kinds and len(images) == 7
          and g["DesiredCapacity"] == 7 and g["MaxSize"] == 10,
          f"advancing fake time: setup, then surge first (+max(maxUnavailable 2, 2 x 1 AZ) = 7 instances): {kinds}")
    check(len([i for i in images.values() if i == new]) == 2, "the surge launches from the new image")
    cloud.ctl("set_eks_timing", paused=False)
    u = wait_update(cloud, "general", upd["id"])
    check(u["status"] == "Successful", "fake time running: the update ends Successful")
    calls = cloud.ctl("nodegroup_calls", cluster=CLUSTER, nodegroup="general")
    waves = calls["waves"]
    check([len(w["terminated"]) for w in waves] == [2, 2, 1] and all(w["limit"] == 2 for w in waves),
          "waves of at most maxUnavailable=2: 2, 2, 1")
    kinds = [e["event"] for e in calls["timeline"]]
    check(kinds == ["setup", "scaleUp", "nodesReady", "drain", "drained", "terminate", "nodesReady", "drain",
                    "drained", "terminate", "nodesReady", "drain", "drained", "terminate", "nodesReady",
                    "scaleDown", "Successful"],
          f"phases: setup, scale up, (new nodes Ready, drain, terminate) per wave, scale down: {kinds}")
    ready = [e for e in calls["timeline"] if e["event"] == "nodesReady"]
    check(sorted(ready[0]["cordoned"]) == sorted(n["metadata"]["name"] for n in state["nodes"]),
          "the old nodes are cordoned once the surge is Ready")
    g, images = group_images(cloud, asg_name)
    check(len(images) == 5 and set(images.values()) == {new} and g["DesiredCapacity"] == 5 and g["MaxSize"] == 8,
          "every ASG instance on the new image; desired and max capacity back to 5 and 8")
    d = eks.describe_nodegroup(clusterName=CLUSTER, nodegroupName="general")["nodegroup"]
    check(d["status"] == "ACTIVE" and d["releaseVersion"] == "1.30.1-20240201", "node group ACTIVE at the new release")
    state = cloud.ctl("kube_state", cluster=CLUSTER)
    node_ids = sorted(n["spec"]["providerID"].rsplit("/", 1)[-1] for n in state["nodes"])
    check(node_ids == sorted(images), "the stand-in's nodes follow the ASG (old removed, new Ready)")
    check(all(any(c["type"] == "Ready" and c["status"] == "True" for c in n["status"]["conditions"]) for n in state["nodes"])
          and not any(n["spec"].get("unschedulable") for n in state["nodes"]),
          "new nodes Ready and schedulable")
    ops = [c["op"] for c in calls["calls"]]
    check(ops[0] == "UpdateNodegroupConfig" and ops.count("UpdateNodegroupVersion") == 6 and ops[-1] == "DescribeUpdate",
          f"call log in order ({len(ops)} calls)")
    check(len([u for u in calls["updates"] if u["type"] == "VersionUpdate"]) == 1, "exactly one version update created")
    code, _, status = error_of(eks.describe_update, name=CLUSTER, updateId="00000000-0000-0000-0000-000000000000",
                               nodegroupName="general")
    check(code == "ResourceNotFoundException" and status == 404, "unknown update id -> 404")

    # --- custom launch template node group --------------------------------------
    # Tagged as the docs tell users to tag the templates nodecycle versions.
    lt = cloud.ec2.create_launch_template(LaunchTemplateName="custom",
                                          LaunchTemplateData={"ImageId": old, "InstanceType": "m5.xlarge"},
                                          TagSpecifications=[{"ResourceType": "launch-template", "Tags": [
                                              {"Key": "eks:cluster-name", "Value": CLUSTER},
                                              {"Key": "nodecycle.dev/managed", "Value": "true"}]}])["LaunchTemplate"]
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
    check(wait_update(cloud, "custom", u["id"])["status"] == "Successful", "LT update Successful")
    waves = cloud.ctl("nodegroup_calls", cluster=CLUSTER, nodegroup="custom")["waves"]
    check([len(w["terminated"]) for w in waves] == [2, 1], "50% of 3 -> waves of 2: 2, 1")
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
    cloud.ctl("set_eks_timing", paused=True)
    u = eks.update_nodegroup_version(clusterName=CLUSTER, nodegroupName="general")["update"]
    check({"type": "ReleaseVersion", "value": "1.30.2-20240301"} in u["params"], "no releaseVersion -> the latest mapped one")
    cloud.ctl("advance_eks_time", seconds=0.01)  # setup and surge
    armed = cloud.ctl("fail_update", cluster=CLUSTER, nodegroup="general")
    check(armed["updateId"] == u["id"], "fail_update armed on the running update")
    _, images = group_images(cloud, asg_name)
    still_old = sorted(i for i, img in images.items() if img != newest)
    cloud.ctl("advance_eks_time", seconds=0.01)
    f = eks.describe_update(name=CLUSTER, updateId=u["id"], nodegroupName="general")["update"]
    check(f["status"] == "Failed" and f["errors"][0]["errorCode"] == "PodEvictionFailure"
          and "evict pods" in f["errors"][0]["errorMessage"]
          and sorted(f["errors"][0]["resourceIds"]) == still_old and len(still_old) == 5,
          "fail_update -> Failed, PodEvictionFailure, resourceIds = instances on the old image")
    g, images = group_images(cloud, asg_name)
    check(g["DesiredCapacity"] == 5 and g["MaxSize"] == 8 and sorted(images) == still_old,
          "after failure: the surge is removed, the old instances stay")
    cloud.ctl("set_eks_timing", paused=False)
    d = eks.describe_nodegroup(clusterName=CLUSTER, nodegroupName="general")["nodegroup"]
    check(d["status"] == "ACTIVE" and d["releaseVersion"] == "1.30.1-20240201", "after failure: ACTIVE, release unchanged")
    again = eks.describe_update(name=CLUSTER, updateId=u["id"], nodegroupName="general")["update"]
    check(again["status"] == "Failed", "a failed update stays Failed")

    drain_checks(cloud, old, newest)

    # --- reset -----------------------------------------------------------------------
    cloud.ctl("reset")
    calls = cloud.ctl("nodegroup_calls", cluster=CLUSTER, nodegroup="general")
    check(calls["calls"] == [] and calls["updates"] == [] and calls["waves"] == [] and calls["timeline"] == [],
          "reset clears calls, updates, waves, timeline")
    check(cloud.asg.describe_auto_scaling_groups()["AutoScalingGroups"] == [], "reset clears the ASGs")
    code, _, _ = error_of(eks.describe_update, name=CLUSTER, updateId=u["id"], nodegroupName="general")
    check(code == "ResourceNotFoundException", "reset clears EKS")
    cloud.ctl("create_cluster", name=CLUSTER, version="1.30")
    err = cloud.ctl_error("create_nodegroup", cluster=CLUSTER, nodegroup="general", releaseVersion="1.30.1-20240201")
    check("map_release" in err, "reset clears release mappings")


def drain_checks(cloud, old, newest):
    """Eviction through the stand-in (PDBs apply), PodEvictionFailure, force, NodeCreationFailure."""
    eks = cloud.eks
    cloud.ctl("set_eks_timing", drainTimeoutSeconds=0.3, readyTimeoutSeconds=0.3)
    ng = cloud.ctl("create_nodegroup", cluster=CLUSTER, nodegroup="pdb", size=2, image=old,
                   releaseVersion="1.30.0-20240101")
    state = cloud.ctl("kube_state", cluster=CLUSTER)
    node = {n["spec"]["providerID"].rsplit("/", 1)[-1]: n["metadata"]["name"] for n in state["nodes"]}
    first, second = (node[i] for i in ng["instances"])
    for name, on, labels, owner in (
        ("free", first, {"app": "free"}, ("ReplicaSet", "free")),
        ("web-0", first, {"app": "web"}, ("ReplicaSet", "web")),
        ("web-1", second, {"app": "web"}, ("ReplicaSet", "web")),
        ("logs-0", first, {"app": "logs"}, ("DaemonSet", "logs")),
    ):
        cloud.ctl("add_pod", cluster=CLUSTER, name=name, node=on, labels=labels, owner_kind=owner[0],
                  owner_name=owner[1], grace_seconds=1)
    cloud.ctl("add_pdb", cluster=CLUSTER, name="web", match_labels={"app": "web"}, max_unavailable=0)
    u = eks.update_nodegroup_version(clusterName=CLUSTER, nodegroupName="pdb")["update"]
    f = wait_update(cloud, "pdb", u["id"])
    pods = {p["metadata"]["name"]: p for p in cloud.ctl("kube_state", cluster=CLUSTER)["pods"]}
    evicted = pods.get("free")
    check(f["status"] == "Failed" and f["errors"][0]["errorCode"] == "PodEvictionFailure"
          and "web-0" in pods and "web-1" in pods and not pods["web-0"]["metadata"].get("deletionTimestamp")
          and "logs-0" in pods and not pods["logs-0"]["metadata"].get("deletionTimestamp")
          and (evicted is None or any(c["type"] == "DisruptionTarget" for c in evicted["status"]["conditions"])),
          "drain: a pod without PDB is evicted, the PDB refuses web-0 past drainTimeoutSeconds -> "
          "PodEvictionFailure; DaemonSet pods stay")
    g, images = group_images(cloud, ng["asg"])
    nodes = cloud.ctl("kube_state", cluster=CLUSTER)["nodes"]
    check(g["DesiredCapacity"] == 2 and set(images.values()) == {old}
          and not any(n["spec"].get("unschedulable") for n in nodes),
          "after PodEvictionFailure: surge removed, old nodes uncordoned")
    u = eks.update_nodegroup_version(clusterName=CLUSTER, nodegroupName="pdb", force=True)["update"]
    check(wait_update(cloud, "pdb", u["id"])["status"] == "Successful", "force: the PDB-blocked update succeeds")
    pods = {p["metadata"]["name"] for p in cloud.ctl("kube_state", cluster=CLUSTER)["pods"]}
    _, images = group_images(cloud, ng["asg"])
    check(not pods & {"web-0", "web-1"} and set(images.values()) == {newest}, "force: pods deleted, nodes replaced")

    bad = cloud.ctl("register_image", name="amazon-eks-node-al2023-x86_64-standard-1.30-v20240401", owner_id="amazon")["image_id"]
    cloud.ctl("map_release", releaseVersion="1.30.3-20240401", image=bad)
    cloud.ctl("sync_nodes", cluster=CLUSTER, never_ready_images=[bad])
    u = eks.update_nodegroup_version(clusterName=CLUSTER, nodegroupName="pdb")["update"]
    f = wait_update(cloud, "pdb", u["id"])
    g, images = group_images(cloud, ng["asg"])
    check(f["status"] == "Failed" and f["errors"][0]["errorCode"] == "NodeCreationFailure"
          and len(f["errors"][0]["resourceIds"]) == 2 and not set(f["errors"][0]["resourceIds"]) & set(images)
          and g["DesiredCapacity"] == 2 and set(images.values()) == {newest},
          "new nodes never Ready -> NodeCreationFailure naming them; their instances removed")
    cloud.ctl("sync_nodes", cluster=CLUSTER, enabled=False)


if __name__ == "__main__":
    run_main(run)
