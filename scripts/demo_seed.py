"""Seeds the local fake cloud for `scripts/demo.sh`: EKS clusters, public AL2023 AMIs published
the way AWS publishes them (image + /aws/service/... parameter), a golden image parameter, the
example policies, and the state table created from template.yaml's own definition.

Usage: demo_seed.py seed | converged <group> <size> | publish <release> <created> | golden <name> <created> | summary | explain
Environment: AWS_ENDPOINT_URL (moto), NODECYCLE_CONTROL (fake cloud control URL), NODECYCLE_TABLE.
"""

import json
import os
import sys
import urllib.request

import boto3
import yaml

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
COMBOS = [("x86_64", "standard"), ("x86_64", "nvidia"), ("x86_64", "neuron"), ("arm64", "standard"), ("arm64", "nvidia")]


def control(op, **args):
    req = urllib.request.Request(
        os.environ["NODECYCLE_CONTROL"] + "/control",
        data=json.dumps({"op": op, "args": args}).encode(),
        headers={"Content-Type": "application/json"},
    )
    with urllib.request.urlopen(req) as resp:
        return json.loads(resp.read())


def publish(k8s, release, created):
    """One AL2023 release for every arch/variant: the image, its pinned parameter, recommended."""
    for arch, variant in COMBOS:
        name = f"amazon-eks-node-al2023-{arch}-{variant}-{k8s}-{release}"
        image = control("register_image", name=name, architecture=arch, owner_id="amazon", creation_date=created)["image_id"]
        base = f"/aws/service/eks/optimized-ami/{k8s}/amazon-linux-2023/{arch}/{variant}"
        control("put_parameter", name=f"{base}/{name}/image_id", value=image)
        control("put_parameter", name=f"{base}/recommended/image_id", value=image)
        if (arch, variant) == ("x86_64", "standard"):
            print(f"  published {name} = {image}")


def golden(name, created):
    image = control("register_image", name=name, architecture="x86_64", owner_id="self", creation_date=created)["image_id"]
    control("put_parameter", name="/golden/eks/al2023/x86_64", value=image)
    print(f"  golden image {name} = {image} -> /golden/eks/al2023/x86_64")


def table_from_template():
    class Loader(yaml.SafeLoader):
        pass

    Loader.add_multi_constructor("!", lambda loader, suffix, node: None)
    with open(os.path.join(ROOT, "template.yaml")) as f:
        props = yaml.load(f, Loader=Loader)["Resources"]["StateTable"]["Properties"]
    ddb = boto3.client("dynamodb")
    ddb.create_table(
        TableName=os.environ["NODECYCLE_TABLE"],
        BillingMode=props["BillingMode"],
        AttributeDefinitions=props["AttributeDefinitions"],
        KeySchema=props["KeySchema"],
    )
    ddb.update_time_to_live(TableName=os.environ["NODECYCLE_TABLE"], TimeToLiveSpecification=props["TimeToLiveSpecification"])


def group(name, cluster, image, size):
    """A self-managed node group: launch template on `image`, Auto Scaling group of `size`, and the
    Kubernetes stand-in registering a Ready node for each of its instances."""
    ec2 = boto3.client("ec2")
    ec2.create_launch_template(
        LaunchTemplateName=name,
        LaunchTemplateData={"ImageId": image, "InstanceType": "m7i.large"},
        TagSpecifications=[{"ResourceType": "launch-template", "Tags": [{"Key": "eks:cluster-name", "Value": cluster}]}],
    )
    boto3.client("autoscaling").create_auto_scaling_group(
        AutoScalingGroupName=name,
        LaunchTemplate={"LaunchTemplateName": name, "Version": "$Latest"},
        MinSize=0,
        MaxSize=size + 4,
        DesiredCapacity=size,
        AvailabilityZones=["us-east-2a", "us-east-2b"],
        Tags=[{"Key": "eks:cluster-name", "Value": cluster, "PropagateAtLaunch": True}],
    )
    control("sync_nodes", cluster=cluster, asg=name, ready=True)
    print(f"  group {name}: {size} nodes on {image}, registered in cluster {cluster}")


def images(name):
    asg = boto3.client("autoscaling").describe_auto_scaling_groups(AutoScalingGroupNames=[name])["AutoScalingGroups"][0]
    ids = [i["InstanceId"] for i in asg["Instances"]]
    if not ids:
        return []
    res = boto3.client("ec2").describe_instances(InstanceIds=ids)["Reservations"]
    return sorted(i["ImageId"] for r in res for i in r["Instances"])


def converged(name, size):
    """Exit 0 when the group has `size` instances, all on the x86_64 standard recommended AMI."""
    want = boto3.client("ssm").get_parameter(
        Name="/aws/service/eks/optimized-ami/1.30/amazon-linux-2023/x86_64/standard/recommended/image_id"
    )["Parameter"]["Value"]
    got = images(name)
    on_new = sum(1 for i in got if i == want)
    print(f"   {name}: {on_new}/{len(got)} nodes on {want}")
    sys.exit(0 if len(got) == int(size) and on_new == len(got) else 1)


def seed():
    for cluster in ("prod", "test"):
        control("create_cluster", name=cluster, version="1.30")
        control("create_kube", cluster=cluster)
    print("  clusters prod and test on Kubernetes 1.30, each with a Kubernetes API stand-in")
    publish("1.30", "v20240807", "2024-08-07T12:00:00Z")
    golden("golden-eks-al2023-2024.08.01", "2024-08-01T09:00:00Z")
    old = boto3.client("ssm").get_parameter(
        Name="/aws/service/eks/optimized-ami/1.30/amazon-linux-2023/x86_64/standard/recommended/image_id"
    )["Parameter"]["Value"]
    group("prod-general", "prod", old, 6)
    group("test-general", "test", old, 6)
    ssm = boto3.client("ssm")
    for example in ("prod-general", "test-general", "prod-golden"):
        with open(os.path.join(ROOT, "examples", f"{example}.yaml")) as f:
            doc = yaml.safe_load(f)
        name = f"/nodecycle/pools/{doc['cluster']}/{doc['name']}"
        with open(os.path.join(ROOT, "examples", f"{example}.yaml")) as f:
            ssm.put_parameter(Name=name, Value=f.read(), Type="String", Overwrite=True)
        print(f"  policy examples/{example}.yaml -> {name}")
    table_from_template()
    print(f"  state table {os.environ['NODECYCLE_TABLE']} (definition read from template.yaml)")


def summary():
    r = json.load(sys.stdin)
    if "errorType" in r:
        sys.exit(f"   handler error {r['errorType']}: {r['errorMessage']}")
    if "clusters" in r:
        for p in r["pools"]:
            allowed = p.get("allowed") or {}
            head = f"   {p['pool']:<14} allowed Drifted={allowed.get('Drifted')}"
            if p.get("launchTemplate"):
                head += f"  launch template -> {p['launchTemplate']}"
            print(head)
            for i in p["started"]:
                print(f"     start rotation of {i}")
            for step in p["steps"]:
                print(f"     {step}")
            if p.get("blocked") and not p["steps"] and not p["started"] and p.get("allowed") is None:
                print(f"     waiting: {p['blocked']}")
            for e in p["errors"]:
                print(f"     error: {e}")
        return
    print(f"   trigger: {r['trigger']}")
    for p in r["pools"]:
        why = p.get("error") or ""
        print(f"   {p['pool'] or p['source']:<14} {p['status']:<9} desired={p['desired']} previous={p['previous']} {why}")
    print(f"   AWS calls for resolution: {r.get('awsCalls', {})}")


def explain():
    r = json.load(sys.stdin)
    if "error" in r:
        sys.exit(f"   {r['error']}")
    d, s = r["desired"], r["desired"]["source"]
    print(f"   {r['pool']} on Kubernetes {r['kubernetesVersion']}: {d['id']} ({d['name']})")
    print(f"   because term {s['term']} ({s['field']} {s['value']}) reads {s.get('parameter')}")
    print(f"   {len(r['candidates'])} candidate(s), best first: " + ", ".join(c["id"] for c in r["candidates"]))


if __name__ == "__main__":
    cmd = sys.argv[1] if len(sys.argv) > 1 else "seed"
    if cmd == "seed":
        seed()
    elif cmd == "publish":
        publish("1.30", sys.argv[2], sys.argv[3])
    elif cmd == "converged":
        converged(sys.argv[2], sys.argv[3])
    elif cmd == "summary":
        summary()
    elif cmd == "explain":
        explain()
    elif cmd == "golden":
        golden(sys.argv[2], sys.argv[3])
    else:
        sys.exit(f"unknown command {cmd}")
