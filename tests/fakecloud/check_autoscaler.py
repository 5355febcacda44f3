#!/usr/bin/env python3
"""Self-check of asg_fidelity.py (Auto Scaling as AWS answers), autoscaler.py (the Cluster
Autoscaler actor) and the EKS update's scale-down beside Cluster Autoscaler (eks_rollout.py),
through boto3 (real wire format over HTTP) and the control ops.

    ~/.cache/nodecycle/venv/bin/python tests/fakecloud/check_autoscaler.py

Exits non-zero on the first failed check.
"""

from __future__ import annotations

from selfcheck import Cloud, check, error_of, run_main, wait_for

CLUSTER = "prod"


def desired(cloud, name):
    return cloud.asg.describe_auto_scaling_groups(AutoScalingGroupNames=[name])["AutoScalingGroups"][0]


def nodes(cloud):
    return cloud.ctl("kube_state", cluster=CLUSTER)["nodes"]


def run(cloud: Cloud):
    asg = cloud.asg
    ami = cloud.ctl("register_image", name="golden-1")["image_id"]
    cloud.ec2.create_launch_template(LaunchTemplateName="golden", LaunchTemplateData={"ImageId": ami,
                                                                                     "InstanceType": "m5.large"})
    asg.create_auto_scaling_group(AutoScalingGroupName="g", MinSize=1, MaxSize=5, DesiredCapacity=3,
                                  LaunchTemplate={"LaunchTemplateName": "golden"}, AvailabilityZones=["us-east-2a"])

    # --- SetDesiredCapacity bounds --------------------------------------------------
    code, msg, status = error_of(asg.set_desired_capacity, AutoScalingGroupName="g", DesiredCapacity=6)
    check(code == "ValidationError" and status == 400
          and msg == "New SetDesiredCapacity value 6 is above max value 5 for the AutoScalingGroup.",
          f"SetDesiredCapacity above MaxSize -> ValidationError ({msg})")
    code, msg, _ = error_of(asg.set_desired_capacity, AutoScalingGroupName="g", DesiredCapacity=0)
    check(code == "ValidationError" and "below min value 1" in msg, f"below MinSize -> ValidationError ({msg})")
    check(desired(cloud, "g")["DesiredCapacity"] == 3, "a refused SetDesiredCapacity changes nothing")
    asg.create_auto_scaling_group(AutoScalingGroupName="at-min", MinSize=2, MaxSize=3, DesiredCapacity=2,
                                  LaunchTemplate={"LaunchTemplateName": "golden"}, AvailabilityZones=["us-east-2a"])
    first = desired(cloud, "at-min")["Instances"][0]["InstanceId"]
    code, msg, _ = error_of(asg.terminate_instance_in_auto_scaling_group, InstanceId=first,
                            ShouldDecrementDesiredCapacity=True)
    check(code == "ValidationError" and "MinSize" in msg, f"a decrement below MinSize -> ValidationError ({msg})")
    asg.terminate_instance_in_auto_scaling_group(InstanceId=first, ShouldDecrementDesiredCapacity=False)
    g = desired(cloud, "at-min")
    check(g["DesiredCapacity"] == 2 and first not in [i["InstanceId"] for i in g["Instances"]]
          and len(g["Instances"]) == 2, "without the decrement the group replaces the instance")

    # --- DescribeScalingActivities -------------------------------------------------
    acts = asg.describe_scaling_activities(AutoScalingGroupName="g")["Activities"]
    check(len(acts) == 3 and all(a["StatusCode"] == "Successful" and a["Description"].startswith(
        "Launching a new EC2 instance: i-") for a in acts), "a Successful launch activity per instance")
    cloud.ctl("insufficient_capacity", group="g", enabled=True)
    asg.set_desired_capacity(AutoScalingGroupName="g", DesiredCapacity=4)
    g = desired(cloud, "g")
    check(g["DesiredCapacity"] == 4 and len(g["Instances"]) == 3, "out of capacity: desired 4, still 3 instances")
    latest = asg.describe_scaling_activities(AutoScalingGroupName="g", MaxRecords=1)["Activities"]
    check(len(latest) == 1 and latest[0]["StatusCode"] == "Failed"
          and "We currently do not have sufficient m5.large capacity" in latest[0]["StatusMessage"],
          "the latest activity is a Failed launch with the InsufficientInstanceCapacity message")
    code, _, _ = error_of(asg.describe_scaling_activities, AutoScalingGroupName="g", MaxRecords=101)
    check(code == "ValidationError", "MaxRecords above 100 -> ValidationError")
    cloud.ctl("insufficient_capacity", group="g", enabled=False)
    check(len(desired(cloud, "g")["Instances"]) == 4, "capacity back: the group launches what it owes")
    check(asg.describe_scaling_activities(AutoScalingGroupName="g", MaxRecords=1)["Activities"][0]["StatusCode"]
          == "Successful", "then a Successful launch is the latest activity")

    # --- UpdateAutoScalingGroup keeps a MixedInstancesPolicy -------------------------
    mip = {"LaunchTemplate": {"LaunchTemplateSpecification": {"LaunchTemplateName": "golden", "Version": "$Latest"},
                              "Overrides": [{"InstanceType": "m5.large"}, {"InstanceType": "m5a.large"}]},
           "InstancesDistribution": {"OnDemandPercentageAboveBaseCapacity": 100}}
    asg.create_auto_scaling_group(AutoScalingGroupName="mixed", MinSize=0, MaxSize=4, DesiredCapacity=1,
                                  MixedInstancesPolicy=mip, AvailabilityZones=["us-east-2a"])
    asg.update_auto_scaling_group(AutoScalingGroupName="mixed", MaxSize=5)
    m = desired(cloud, "mixed")
    check(m["MaxSize"] == 5 and [o["InstanceType"] for o in m["MixedInstancesPolicy"]["LaunchTemplate"]["Overrides"]]
          == ["m5.large", "m5a.large"], "UpdateAutoScalingGroup(MaxSize) keeps the MixedInstancesPolicy")

    # --- the Cluster Autoscaler actor ---------------------------------------------------
    cloud.ctl("create_kube", cluster=CLUSTER)
    cloud.ctl("sync_nodes", cluster=CLUSTER, asg="g")
    wait_for("4 nodes", lambda: len(nodes(cloud)) == 4)
    cloud.ctl("ca_attach", cluster=CLUSTER, group="g", podsPerNode=2)
    names = sorted(n["metadata"]["name"] for n in nodes(cloud))
    for i, n in enumerate(names[:3]):
        cloud.ctl("add_pod", cluster=CLUSTER, name=f"web-{i}", node=n, owner_kind="ReplicaSet", owner_name="web",
                  labels={"app": "web"}, grace_seconds=0)
    cloud.ctl("add_pod", cluster=CLUSTER, name="ds-0", node=names[3], owner_kind="DaemonSet", owner_name="ds")
    cloud.ctl("set_scale", cluster=CLUSTER, namespace="default", kind="ReplicaSet", name="web", replicas=3)
    cloud.ctl("add_pdb", cluster=CLUSTER, name="web", match_labels={"app": "web"}, max_unavailable=1)
    for i in range(5):
        cloud.ctl("add_pod", cluster=CLUSTER, name=f"batch-{i}", owner_kind="ReplicaSet", owner_name="batch",
                  grace_seconds=0)
    ws = cloud.ctl("workloads_step", cluster=CLUSTER)
    check(len(ws["bound"]) == 5 and ws["pending"] == [], f"the scheduler binds Pending pods where they fit: {ws}")
    for i in range(5, 10):
        cloud.ctl("add_pod", cluster=CLUSTER, name=f"batch-{i}", owner_kind="ReplicaSet", owner_name="batch",
                  grace_seconds=0)
    up = cloud.ctl("ca_scale_up", group="g")
    check(up["action"] == "scaleUp" and up["from"] == 4 and up["to"] == 5,
          f"CA scales up for 5 Pending pods (3 nodes' worth), capped at MaxSize 5: {up}")
    check(desired(cloud, "g")["DesiredCapacity"] == 5, "SetDesiredCapacity by CA")
    none = cloud.ctl("ca_scale_up", group="g", by=1)
    check(none["action"] == "noScaleUp" and "max size" in none["reason"], "at MaxSize CA does not scale up")

    # Scale down: the annotation, the PDB, then an empty node.
    node = names[3]
    # Annotated through the stand-in's Kubernetes API (a merge patch, as nodecycle does).
    import json
    import ssl
    import urllib.request

    kube = cloud.ctl("create_kube", cluster=CLUSTER)
    token = cloud.ctl("kube_token", cluster=CLUSTER)["token"]
    ctx = ssl.create_default_context(cafile=kube["caFile"])
    req = urllib.request.Request(
        f"{kube['endpoint']}/api/v1/nodes/{node}", method="PATCH",
        data=json.dumps({"metadata": {"annotations": {
            "cluster-autoscaler.kubernetes.io/scale-down-disabled": "true"}}}).encode(),
        headers={"Authorization": f"Bearer {token}", "Content-Type": "application/merge-patch+json"})
    urllib.request.urlopen(req, context=ctx).read()
    refused = cloud.ctl("ca_scale_down", group="g", node=node)
    check(refused["action"] == "noScaleDown" and "scale-down disabled" in refused["reason"],
          f"CA skips a node annotated scale-down-disabled: {refused}")
    two_web = [n for n in names if sum(1 for p in cloud.ctl("kube_state", cluster=CLUSTER)["pods"]
                                       if p["spec"].get("nodeName") == n
                                       and p["metadata"]["name"].startswith("web-")) >= 1]
    check(len(two_web) >= 1, "a node runs a web pod")
    down = cloud.ctl("ca_scale_down", group="g", node=two_web[0], hold=True)
    check(down["action"] == "draining", f"CA taints and evicts (held): {down}")
    tainted = [n for n in nodes(cloud) if n["metadata"]["name"] == two_web[0]][0]
    check(any(t["key"] == "ToBeDeletedByClusterAutoscaler" and t["effect"] == "NoSchedule"
              for t in tainted["spec"].get("taints", [])), "the node carries ToBeDeletedByClusterAutoscaler")
    cloud.ctl("workloads_step", cluster=CLUSTER)
    done = cloud.ctl("ca_finish", group="g", node=two_web[0])
    check(done["action"] == "scaleDown" and done["to"] == done["from"] - 1,
          f"CA terminates the drained node with a decrement: {done}")
    records = cloud.ctl("scaling_records", group="g")
    ca_terms = [t for t in records["terminations"] if t["by"] == "cluster-autoscaler"]
    check(len(ca_terms) == 1 and ca_terms[0]["pods"] == [] and ca_terms[0]["decrement"] is True
          and ca_terms[0]["op"] == "TerminateInstanceInAutoScalingGroup",
          "recorded: CA terminated with a decrement, no workload pod on the node")
    check([c["by"] for c in records["capacity"] if c["op"] == "SetDesiredCapacity"][-1] == "cluster-autoscaler",
          "capacity records name who changed desired capacity")
    # An undrained termination is recorded with its pods.
    busy = [n for n in nodes(cloud)
            if any(p["spec"].get("nodeName") == n["metadata"]["name"] and not p["metadata"]["name"].startswith("ds-")
                   for p in cloud.ctl("kube_state", cluster=CLUSTER)["pods"])][0]
    iid = busy["spec"]["providerID"].rsplit("/", 1)[-1]
    asg.terminate_instance_in_auto_scaling_group(InstanceId=iid, ShouldDecrementDesiredCapacity=True)
    rec = [t for t in cloud.ctl("scaling_records", group="g")["terminations"] if t["instance"] == iid][0]
    check(rec["by"] == "api" and rec["pods"], f"an undrained termination is recorded with its pods: {rec}")

    # --- EKS update beside CA: the scale-down is skipped when CA scaled up -------------------
    old = cloud.ctl("register_image", name="amazon-eks-node-al2023-x86_64-standard-1.30-v20240101",
                    owner_id="amazon")["image_id"]
    new = cloud.ctl("register_image", name="amazon-eks-node-al2023-x86_64-standard-1.30-v20240201",
                    owner_id="amazon")["image_id"]
    cloud.ctl("create_cluster", name="mng", version="1.30")
    cloud.ctl("map_release", releaseVersion="1.30.0-20240101", image=old)
    cloud.ctl("map_release", releaseVersion="1.30.1-20240201", image=new)
    for name, ca_adds in (("plain", 0), ("beside-ca", 2)):
        ng = cloud.ctl("create_nodegroup", cluster="mng", nodegroup=name, releaseVersion="1.30.0-20240101", size=3)
        cloud.ctl("set_eks_timing", paused=True)
        upd = cloud.eks.update_nodegroup_version(clusterName="mng", nodegroupName=name,
                                                 releaseVersion="1.30.1-20240201")["update"]
        cloud.ctl("advance_eks_time", seconds=0.01)
        surged = desired(cloud, ng["asg"])
        if ca_adds:
            cloud.asg.set_desired_capacity(AutoScalingGroupName=ng["asg"],
                                           DesiredCapacity=surged["DesiredCapacity"] + ca_adds)
        cloud.ctl("set_eks_timing", paused=False)
        wait_for(f"update of {name}", lambda: cloud.eks.describe_update(
            name="mng", updateId=upd["id"], nodegroupName=name)["update"]["status"] != "InProgress")
        after = desired(cloud, ng["asg"])
        kinds = [e["event"] for e in cloud.ctl("nodegroup_calls", cluster="mng", nodegroup=name)["timeline"]]
        if ca_adds:
            check(after["DesiredCapacity"] == surged["DesiredCapacity"] + ca_adds
                  and after["MaxSize"] == surged["MaxSize"] and "scaleDownSkipped" in kinds
                  and "scaleDown" not in kinds,
                  f"CA scaled up during the update: EKS skips its scale-down ({after['DesiredCapacity']}, {kinds})")
        else:
            check(after["DesiredCapacity"] == 3 and after["MaxSize"] == 6 and "scaleDown" in kinds,
                  f"without CA the scale-down puts desired and max back ({after['DesiredCapacity']})")


if __name__ == "__main__":
    run_main(run)
