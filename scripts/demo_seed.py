"""Seeds the local fake cloud for `scripts/demo.sh`: EKS clusters, public AL2023 AMIs published
the way AWS publishes them (image + /aws/service/... parameter), a golden image parameter, a
self-managed Auto Scaling group per cluster, a managed node group on a customer launch template
(prod/golden), the example policies, and the state table created from template.yaml's own definition.

Usage: demo_seed.py seed | converged <group> <size> [<release>] | converged-nodegroup <cluster> <nodegroup> <size>
       | publish <release> <created> | publish-bad <release> <created> | golden <name> <created>
       | summary | explain | pool-state <pool>... | quarantined <release> | journey
Environment: AWS_ENDPOINT_URL (moto), NODECYCLE_CONTROL (fake cloud control URL), NODECYCLE_TABLE,
NODECYCLE_DEMO_STATE (optional: file where `summary` remembers which EKS calls it already showed),
NODECYCLE_DEMO_SOAK (optional: the soak the demo gives examples/prod-apps.yaml instead of 72h).
"""

import json
import os
import sys
import urllib.request

import boto3
from boto3.dynamodb.conditions import Key
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
            standard = image
    return standard


def publish_bad(k8s, release, created):
    """A release whose x86_64 nodes register in the test cluster but never become Ready."""
    image = publish(k8s, release, created)
    control("sync_nodes", cluster="test", asg="test-general", never_ready_images=[image])
    print(f"  (nodes launched from {image} never become Ready in cluster test)")


def golden(name, created):
    image = control("register_image", name=name, architecture="x86_64", owner_id="self", creation_date=created)["image_id"]
    control("put_parameter", name="/golden/eks/al2023/x86_64", value=image)
    print(f"  golden image {name} = {image} -> /golden/eks/al2023/x86_64")
    return image


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


def opted_in(cluster):
    """The tags of a launch template nodecycle may version (docs/iam-and-rbac.md): the cluster tag
    the stack's IAM conditions require and the owner's opt-in nodecycle.dev/managed=true."""
    return [{"ResourceType": "launch-template", "Tags": [{"Key": "eks:cluster-name", "Value": cluster},
                                                         {"Key": "nodecycle.dev/managed", "Value": "true"}]}]


def group(name, cluster, image, size):
    """A self-managed node group: launch template on `image`, Auto Scaling group of `size`, and the
    Kubernetes stand-in registering a Ready node for each of its instances."""
    ec2 = boto3.client("ec2")
    ec2.create_launch_template(
        LaunchTemplateName=name,
        LaunchTemplateData={"ImageId": image, "InstanceType": "m7i.large"},
        TagSpecifications=opted_in(cluster),
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


def managed_group(name, cluster, template, image, size):
    """A managed node group on a customer launch template `template` (version 1 names `image`):
    EKS copies it into its own template and runs the group's Auto Scaling group on it. The cluster's
    Kubernetes stand-in follows every instance tagged for the cluster, so the node group's nodes
    register now and its replacements as EKS's waves launch them. The group was created with
    updateConfig maxUnavailablePercentage 50 (2 of 3 nodes at once): nodecycle narrows it to the
    pool's budget before it starts an update."""
    boto3.client("ec2").create_launch_template(
        LaunchTemplateName=template,
        LaunchTemplateData={"ImageId": image, "InstanceType": "m5.large"},
        TagSpecifications=opted_in(cluster),
    )
    control("sync_nodes", cluster=cluster, ready=True)
    created = control(
        "create_nodegroup",
        cluster=cluster,
        nodegroup=name,
        size=size,
        max=size + 3,
        launchTemplate={"name": template, "version": "1"},
        maxUnavailablePercentage=50,
    )
    print(
        f"  managed node group {name}: {size} nodes on launch template {template} version 1 ({image}),"
        f" amiType {created['amiType']}, updateConfig maxUnavailablePercentage 50, registered in cluster {cluster}"
    )


def describe_nodegroup(cluster, name):
    return boto3.client("eks").describe_nodegroup(clusterName=cluster, nodegroupName=name)["nodegroup"]


def images(name):
    asg = boto3.client("autoscaling").describe_auto_scaling_groups(AutoScalingGroupNames=[name])["AutoScalingGroups"][0]
    ids = [i["InstanceId"] for i in asg["Instances"]]
    if not ids:
        return []
    res = boto3.client("ec2").describe_instances(InstanceIds=ids)["Reservations"]
    return sorted(i["ImageId"] for r in res for i in r["Instances"])


def converged(name, size, release=None):
    """Exit 0 when the group has `size` instances, all on the x86_64 standard AMI of `release`
    (default: the recommended one)."""
    base = "/aws/service/eks/optimized-ami/1.30/amazon-linux-2023/x86_64/standard"
    leaf = f"amazon-eks-node-al2023-x86_64-standard-1.30-{release}" if release else "recommended"
    want = boto3.client("ssm").get_parameter(Name=f"{base}/{leaf}/image_id")["Parameter"]["Value"]
    got = images(name)
    on_new = sum(1 for i in got if i == want)
    print(f"   {name}: {on_new}/{len(got)} nodes on {want}")
    sys.exit(0 if len(got) == int(size) and on_new == len(got) else 1)


def version_update(cluster, name):
    """The node group's last version update (fake EKS's record) and its waves."""
    calls = control("nodegroup_calls", cluster=cluster, nodegroup=name)
    updates = [u for u in calls["updates"] if u["type"] == "VersionUpdate"]
    if not updates:
        return None, []
    u = updates[-1]
    return u, [w for w in calls["waves"] if w["updateId"] == u["id"]]


def target(update):
    """What the update moved the group to; for a launch template version, the image it names."""
    p = {x["type"]: x["value"] for x in update["params"]}
    if "LaunchTemplateVersion" not in p:
        return f"releaseVersion {p.get('ReleaseVersion')}"
    name, new = p.get("LaunchTemplateName"), int(p["LaunchTemplateVersion"])
    versions = boto3.client("ec2").describe_launch_template_versions(
        LaunchTemplateName=name, Versions=[str(new - 1), str(new)]
    )["LaunchTemplateVersions"]
    image = {v["VersionNumber"]: v["LaunchTemplateData"].get("ImageId") for v in versions}
    return f"launch template {name} version {new} (ImageId {image.get(new - 1)} -> {image.get(new)})"


def converged_nodegroup(cluster, name, size):
    """Exit 0 when managed node group `name` has `size` instances, all on the golden image, and its
    version update finished (Successful, node group ACTIVE)."""
    want = boto3.client("ssm").get_parameter(Name="/golden/eks/al2023/x86_64")["Parameter"]["Value"]
    ng = describe_nodegroup(cluster, name)
    got = images(ng["resources"]["autoScalingGroups"][0]["name"])
    on_new = sum(1 for i in got if i == want)
    update, waves = version_update(cluster, name)
    lt = ng.get("launchTemplate") or {}
    print(f"   {cluster}/{name}: {on_new}/{len(got)} nodes on {want}, node group {ng['status']} on launch template {lt.get('name')} version {lt.get('version')}")
    if update is not None:
        config = json.dumps(ng.get("updateConfig"), separators=(",", ":"))
        widest = max((len(w["terminated"]) for w in waves), default=0)
        print(
            f"   {cluster}/{name}: node group update {update['id'][:8]} {update['status']}: {target(update)},"
            f" {len(waves)} wave(s) of at most {widest} node(s); the group's updateConfig is back to {config}"
        )
    done = update is not None and update["status"] == "Successful" and ng["status"] == "ACTIVE"
    sys.exit(0 if done and len(got) == int(size) and on_new == len(got) else 1)


def seed():
    for cluster in ("prod", "test"):
        control("create_cluster", name=cluster, version="1.30")
        control("create_kube", cluster=cluster)
    print("  clusters prod and test on Kubernetes 1.30, each with a Kubernetes API stand-in")
    publish("1.30", "v20240807", "2024-08-07T12:00:00Z")
    first_golden = golden("golden-eks-al2023-2024.08.01", "2024-08-01T09:00:00Z")
    old = boto3.client("ssm").get_parameter(
        Name="/aws/service/eks/optimized-ami/1.30/amazon-linux-2023/x86_64/standard/recommended/image_id"
    )["Parameter"]["Value"]
    group("prod-general", "prod", old, 6)
    group("test-general", "test", old, 6)
    group("prod-apps", "prod", old, 4)
    managed_group("golden", "prod", "prod-golden", first_golden, 3)
    ssm = boto3.client("ssm")
    soak = os.environ.get("NODECYCLE_DEMO_SOAK")
    for example in ("prod-general", "test-general", "prod-golden", "prod-apps"):
        with open(os.path.join(ROOT, "examples", f"{example}.yaml")) as f:
            text = f.read()
        doc = yaml.safe_load(text)
        name = f"/nodecycle/pools/{doc['cluster']}/{doc['name']}"
        note = ""
        if soak and "soak: 72h" in text:
            text = text.replace("soak: 72h", f"soak: {soak}")
            note = f" (soak {soak} for the demo)"
        ssm.put_parameter(Name=name, Value=text, Type="String", Overwrite=True)
        print(f"  policy examples/{example}.yaml -> {name}{note}")
    table_from_template()
    print(f"  state table {os.environ['NODECYCLE_TABLE']} (definition read from template.yaml)")


def managed_node_group(pool):
    """The managed node group of pool `<cluster>/<name>`, from its policy; None for an Auto
    Scaling group pool."""
    try:
        text = boto3.client("ssm").get_parameter(Name=f"/nodecycle/pools/{pool}")["Parameter"]["Value"]
    except Exception:  # noqa: BLE001 - no policy: not shown as a node group
        return None
    return ((yaml.safe_load(text) or {}).get("nodeGroup") or {}).get("managedNodeGroup")


def eks_calls(cluster, name):
    """One line per EKS call the rotator made on managed node group `name` since the last summary,
    and one per wave EKS carried out meanwhile (on its own time), from the fake EKS's call log and
    waves; what was already shown is remembered in NODECYCLE_DEMO_STATE."""
    state_file = os.environ.get("NODECYCLE_DEMO_STATE")
    state = {}
    if state_file and os.path.exists(state_file):
        with open(state_file) as f:
            state = json.load(f)
    key = f"{cluster}/{name}"
    log = control("nodegroup_calls", cluster=cluster, nodegroup=name)
    updates = [u for u in log["updates"] if u["type"] == "VersionUpdate"]
    waves = [
        f"EKS wave {k + 1} of update {w['updateId'][:8]} (EKS's own pace): replaced "
        f"{', '.join(w['terminated'])} by {', '.join(w['launched'])} on {w['image']}"
        for k, w in enumerate(log["waves"])
    ][state.get(f"{key}#waves", 0):]
    lines, started = [], 0
    for n, call in enumerate(log["calls"]):
        op, body, status = call["op"], call["body"] or {}, call["status"]
        if status != 200:
            line = f"EKS {op}: HTTP {status}"
        elif op == "UpdateNodegroupConfig":
            line = f"EKS UpdateNodegroupConfig: updateConfig {json.dumps(body.get('updateConfig'), separators=(',', ':'))}"
        elif op == "UpdateNodegroupVersion":
            u = updates[min(started, len(updates) - 1)]
            started += 1
            if body.get("launchTemplate"):
                lt = body["launchTemplate"]
                what = f"launch template {lt.get('name') or lt.get('id')} version {lt.get('version')}"
            else:
                what = f"releaseVersion {body.get('releaseVersion')}"
            line = f"EKS UpdateNodegroupVersion: {what} -> update {u['id'][:8]}"
        elif op == "DescribeUpdate":
            u = next((u for u in updates if u["id"] == body.get("updateId")), None)
            answered = call.get("updateStatus") or (u or {}).get("status")
            errors = "; ".join(e.get("errorMessage", "") for e in (u or {}).get("errors", [])) if answered == "Failed" else ""
            line = f"EKS DescribeUpdate {str(body.get('updateId'))[:8]}: {answered}" + (f" ({errors})" if errors else "")
        else:
            line = f"EKS {op}"
        if n >= state.get(key, 0):
            if op == "DescribeUpdate":
                lines += waves  # what EKS did since the last look comes before the look
                waves = []
            lines.append(line)
    lines += waves
    state[key] = len(log["calls"])
    state[f"{key}#waves"] = len(log["waves"])
    if state_file:
        with open(state_file, "w") as f:
            json.dump(state, f)
    # The last line tells how far the group is: nodes on the image the last update rolls out.
    want = next((w["image"] for w in reversed(log["waves"]) if updates and w["updateId"] == updates[-1]["id"]), None)
    if lines and want:
        ng = describe_nodegroup(cluster, name)
        got = images(ng["resources"]["autoScalingGroups"][0]["name"])
        lines[-1] += f"; {sum(1 for i in got if i == want)}/{len(got)} nodes on {want}"
    return lines


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
                print(f"     start {i}" if i.startswith("node group update") else f"     start rotation of {i}")
            ng = managed_node_group(p["pool"])
            calls = eks_calls(p["pool"].split("/")[0], ng) if ng else []
            for line in calls:
                print(f"     {line}")
            for step in p["steps"]:
                print(f"     {step}")
            if p.get("blocked") and not p["steps"] and not p["started"] and (p.get("allowed") is None or (ng and not calls)):
                print(f"     waiting: {p['blocked']}")
            for e in p["errors"]:
                print(f"     error: {e}")
        return
    print(f"   trigger: {r['trigger']}")
    for p in r["pools"]:
        why = p.get("error") or p.get("waiting") or ""
        print(f"   {p['pool'] or p['source']:<14} {p['status']:<9} desired={p['desired']} previous={p['previous']} {why}")
    print(f"   AWS calls for resolution: {r.get('awsCalls', {})}")


def pool_state(pools):
    """Each pool's desired AMI and release history, and the quarantine list, from the state table."""
    table = boto3.resource("dynamodb").Table(os.environ["NODECYCLE_TABLE"])
    for pool in pools:
        item = table.get_item(Key={"pk": f"POOL#{pool}", "sk": "STATE"}, ConsistentRead=True).get("Item") or {}
        doc = json.loads(item["doc"]) if isinstance(item.get("doc"), str) else item
        desired = (doc.get("desired") or {}).get("name", "-")
        print(f"   {pool:<14} desired {desired}")
        for e in doc.get("releases") or []:
            if e.get("how") == "promoted":
                how = f"promoted from {e.get('from')} (proven there at {e.get('provenAt')})"
            else:
                how = f"rolled back from {e.get('fromRelease')}: {e.get('reason')}"
            print(f"     {e['at']}  {e['release']}  {how}")
        if doc.get("promotionWait"):
            print(f"     waiting: {doc['promotionWait']}")
    items = table.query(KeyConditionExpression=Key("pk").eq("QUARANTINE"))["Items"]
    for q in items:
        doc = json.loads(q["doc"]) if isinstance(q.get("doc"), str) else q
        if doc.get("liftedAt"):
            continue
        target = " ".join(f"{k} {v}" for k, v in (doc.get("target") or {}).items())
        print(f"   quarantined: {target} by {doc.get('by')} at {doc.get('at')}: {doc.get('reason')}")


def quarantined(release):
    """Exit 0 when `release` is quarantined (a live entry)."""
    table = boto3.resource("dynamodb").Table(os.environ["NODECYCLE_TABLE"])
    item = table.get_item(Key={"pk": "QUARANTINE", "sk": f"Q#REL#{release}"}, ConsistentRead=True).get("Item")
    doc = json.loads(item["doc"]) if item else {}
    sys.exit(0 if doc and not doc.get("liftedAt") else 1)


def journey():
    """One line per pool (indented by chain depth) of `nodecycle promotion <release>`."""
    r = json.load(sys.stdin)
    for q in r.get("quarantined") or []:
        print(f"   quarantined ({q.get('by')}): {q.get('reason')}")
    for p in r["pools"]:
        indent = "  " * int(p.get("depth") or 0)
        print(f"   {indent}{p['pool']:<14} {p['state']}")


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
        converged(sys.argv[2], sys.argv[3], sys.argv[4] if len(sys.argv) > 4 else None)
    elif cmd == "converged-nodegroup":
        converged_nodegroup(sys.argv[2], sys.argv[3], sys.argv[4])
    elif cmd == "summary":
        summary()
    elif cmd == "explain":
        explain()
    elif cmd == "publish-bad":
        publish_bad("1.30", sys.argv[2], sys.argv[3])
    elif cmd == "journey":
        journey()
    elif cmd == "quarantined":
        quarantined(sys.argv[2])
    elif cmd == "pool-state":
        pool_state(sys.argv[2:])
    elif cmd == "golden":
        golden(sys.argv[2], sys.argv[3])
    else:
        sys.exit(f"unknown command {cmd}")
