"""Control op ``seed_groups``: many self-managed node groups (launch template + Auto Scaling
group + its instances) in one call, optionally with their Kubernetes Nodes.

Every group is made by moto itself from the same two requests a test would send through
the SDK (CreateLaunchTemplate, CreateAutoScalingGroup), serialized by botocore and handed to
moto's request handlers in process (moto's own ``BotocoreStubber``): moto parses them,
launches the instances through the Auto Scaling group (RunInstances inside moto), tags and
addresses them as it always does. Only the HTTP round trips (and the fault injection at the
dispatch layer, which never applies to control ops) are skipped, so every AWS API answers
about these groups exactly as about groups made over the wire. With the indexes of
``ec2_index.py`` a launch no longer costs the number of instances already there: 50,000
instances seed in about a minute.

Nodes (``nodes``): for every cluster of the seeded groups that has a Kubernetes stand-in,
one pass of that stand-in's own ``sync_nodes`` logic registers a Node per running instance
tagged with the cluster (names from the private IPs, providerID, labels, Ready), without
leaving the background sync on.
"""

from __future__ import annotations

import threading
import time

_LOCK = threading.Lock()  # one seeding at a time: moto's subnet address generator is not thread-safe
_CLIENTS: dict = {}


def _client(service: str, region: str):
    """A boto3 client whose requests go to moto's handlers in this process."""
    key = (service, region)
    client = _CLIENTS.get(key)
    if client is None:
        import boto3
        from botocore.config import Config
        from moto.core.botocore_stubber import BotocoreStubber

        client = boto3.client(
            service,
            region_name=region,
            aws_access_key_id="testing",
            aws_secret_access_key="testing",
            config=Config(retries={"total_max_attempts": 1}),
        )
        stub = BotocoreStubber()
        stub.enabled = True
        client.meta.events.register_first("before-send", stub)
        _CLIENTS[key] = client
    return client


def _group_requests(spec: dict, region: str, ControlError):  # noqa: N803 - class passed in
    """(CreateLaunchTemplate params, CreateAutoScalingGroup params) for one group spec, as
    the tests' own helper sends them."""
    if not isinstance(spec, dict):
        raise ControlError(f"each group must be an object, got {spec!r}")
    name = spec.get("name")
    image = spec.get("image")
    if not isinstance(name, str) or not name:
        raise ControlError(f"group name must be a non-empty string, got {name!r}")
    if not isinstance(image, str) or not image.startswith("ami-"):
        raise ControlError(f"group {name}: image must be an AMI id (ami-...), got {image!r}")
    desired = spec.get("desired", 0)
    minimum = spec.get("min", 0)
    maximum = spec.get("max", desired)
    for field, value in (("desired", desired), ("min", minimum), ("max", maximum)):
        if not isinstance(value, int) or isinstance(value, bool) or value < 0:
            raise ControlError(f"group {name}: {field} must be an integer >= 0, got {value!r}")
    if not minimum <= desired <= maximum:
        raise ControlError(f"group {name}: needs min <= desired <= max, got {minimum}, {desired}, {maximum}")
    tags = spec.get("tags") or {}
    if not isinstance(tags, dict):
        raise ControlError(f"group {name}: tags must be an object {{key: value}}")
    template_tags = spec.get("templateTags") or {}
    if not isinstance(template_tags, dict):
        raise ControlError(f"group {name}: templateTags must be an object {{key: value}}")
    lt = {
        "LaunchTemplateName": name,
        "LaunchTemplateData": {"ImageId": image, "InstanceType": spec.get("instanceType", "m5.large")},
    }
    if template_tags:
        lt["TagSpecifications"] = [
            {
                "ResourceType": "launch-template",
                "Tags": [{"Key": str(k), "Value": str(v)} for k, v in template_tags.items()],
            }
        ]
    asg = {
        "AutoScalingGroupName": name,
        "LaunchTemplate": {"LaunchTemplateName": name, "Version": spec.get("launchTemplateVersion", "$Latest")},
        "MinSize": minimum,
        "MaxSize": maximum,
        "DesiredCapacity": desired,
    }
    if spec.get("subnet"):
        asg["VPCZoneIdentifier"] = spec["subnet"]
    else:
        asg["AvailabilityZones"] = spec.get("availabilityZones") or [f"{region}a"]
    asg_tags = []
    if spec.get("cluster"):
        asg_tags.append({"Key": "eks:cluster-name", "Value": str(spec["cluster"]), "PropagateAtLaunch": True})
    for key, value in tags.items():
        asg_tags.append({"Key": str(key), "Value": str(value), "PropagateAtLaunch": True})
    if asg_tags:
        asg["Tags"] = asg_tags
    return lt, asg


def seed_groups(args: dict, region: str, ControlError) -> dict:  # noqa: N803 - class passed in
    groups = args.get("groups")
    if not isinstance(groups, list) or not groups:
        raise ControlError("groups must be a non-empty list of {name, image, desired, ...}")
    nodes = args.get("nodes", False)
    if nodes is not False and nodes is not True and not isinstance(nodes, dict):
        raise ControlError("nodes must be true, false or a sync_nodes configuration object")
    requests = [_group_requests(spec, region, ControlError) for spec in groups]
    names = [lt["LaunchTemplateName"] for lt, _ in requests]
    if len(set(names)) != len(names):
        raise ControlError("group names must be unique")
    from botocore.exceptions import ClientError

    started = time.monotonic()
    ec2 = _client("ec2", region)
    autoscaling = _client("autoscaling", region)
    templates = {}
    launched = 0
    with _LOCK:
        for lt, asg in requests:
            name = lt["LaunchTemplateName"]
            try:
                made = ec2.create_launch_template(**lt)
                autoscaling.create_auto_scaling_group(**asg)
            except ClientError as e:
                err = e.response.get("Error", {})
                raise ControlError(
                    f"group {name}: {err.get('Code')}: {err.get('Message')} "
                    f"({len(templates)} groups seeded before it)"
                ) from e
            templates[name] = made["LaunchTemplate"]["LaunchTemplateId"]
            launched += asg["DesiredCapacity"]
    seeded = time.monotonic()
    registered = {}
    if nodes is not False:
        registered = _register_nodes(
            region, sorted({str(s["cluster"]) for s in groups if s.get("cluster")}), nodes if isinstance(nodes, dict) else {}
        )
    return {
        "groups": len(templates),
        "instances": launched,
        "launchTemplates": templates,
        "nodes": registered,
        "seconds": round(time.monotonic() - started, 3),
        "seedSeconds": round(seeded - started, 3),
    }


def _register_nodes(region: str, clusters: list, cfg: dict) -> dict:
    """One sync_nodes pass per cluster with a stand-in; {cluster: nodes it has}."""
    import kube

    out = {}
    for cluster in clusters:
        with kube._CLUSTERS_LOCK:
            c = kube.CLUSTERS.get((region, cluster))
        if c is None:
            continue
        sync = {k: cfg.get(k) for k in ("ready", "never_ready_images", "labels", "kubelet_versions")}
        if sync["ready"] is None:
            sync["ready"] = True
        sync["asg"] = None
        sync["register_delay_seconds"] = None
        with c.lock:
            saved = c.sync
            c.sync = sync
            try:
                c.sync_nodes_once()
            finally:
                c.sync = saved
            out[cluster] = len(c.store["nodes"])
    return out


def register(op, ControlError) -> None:  # noqa: N803 - class passed in
    import ec2_index
    import fast_serialize

    @op("seed_groups")
    def seed_groups_op(args):
        """Many self-managed node groups at once (see the module doc and README)."""
        import aws_fixtures

        aws_fixtures.import_and_patch()
        return seed_groups(args, args.get("region") or "us-east-2", ControlError)

    @op("moto_speedups")
    def moto_speedups_op(args):
        """The indexes' counters; `enabled: false` answers with moto's own walks (and
        serializer) from now on, `true` with the indexes again."""
        if "enabled" in args:
            if not isinstance(args["enabled"], bool):
                raise ControlError("enabled must be true or false")
            ec2_index.set_enabled(args["enabled"])
            fast_serialize.set_enabled(args["enabled"])
        return ec2_index.stats()
