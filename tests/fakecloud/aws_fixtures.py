"""Fixtures written straight into moto's backends, plus in-process moto patches.

moto's public APIs refuse or ignore some things the real AWS has and nodecycle
relies on: SSM parameters under ``/aws/service/...`` (PutParameter refuses the
``/aws/`` prefix), AMIs with an architecture, owner, tags, creation and
deprecation time (RegisterImage ignores them), and direct control of an EKS
cluster's version/endpoint/CA. The control ops here fill that gap; the data
then comes back through the *real* AWS APIs served by moto.

Patches applied to moto (``apply_patches``), each to match real EC2 on the wire:
  * DescribeImages honours ``IncludeDeprecated``: without it (and without
    ``ImageIds``) images whose DeprecationTime has passed are left out unless
    the caller owns them, as EC2 documents. Querying by ``ImageIds`` always
    returns them.
  * DescribeImages applies ``Filters`` and ``Owners`` also when ``ImageIds`` is
    given (moto ignores them then; EC2 combines all of them).
  * Images carry ``DeprecationTime`` and ``ImageOwnerAlias`` in the response.
  * EKS managed node group updates (UpdateNodegroupVersion, DescribeUpdate,
    node groups backed by a real Auto Scaling group): see ``eks_updates.py``.
  * Auto Scaling lifecycle actions (CompleteLifecycleAction,
    RecordLifecycleActionHeartbeat): see ``lifecycle.py``.
"""

from __future__ import annotations

import datetime as _dt
import json
import secrets
import threading
import urllib.request

ACCOUNT_ID = "123456789012"
DEFAULT_REGION = "us-east-2"
AMAZON_OWNER_ID = "137112412989"  # the owner id EC2 shows for alias "amazon"


def _region(args: dict) -> str:
    return args.get("region") or DEFAULT_REGION


def _account(args: dict) -> str:
    """The account an op writes into: `account` (12 digits) or the default one."""
    account = str(args.get("account") or ACCOUNT_ID)
    if len(account) != 12 or not account.isdigit():
        raise ValueError(f"account must be 12 digits, got {account!r}")
    return account


def parse_rfc3339(value: str) -> _dt.datetime:
    v = value.strip()
    if v.endswith("Z") or v.endswith("z"):
        v = v[:-1] + "+00:00"
    d = _dt.datetime.fromisoformat(v)
    if d.tzinfo is None:
        d = d.replace(tzinfo=_dt.timezone.utc)
    return d.astimezone(_dt.timezone.utc)


def ec2_time(d: _dt.datetime) -> str:
    """EC2's wire format for time strings, e.g. 2024-05-01T00:00:00.000Z."""
    d = d.astimezone(_dt.timezone.utc)
    return d.strftime("%Y-%m-%dT%H:%M:%S.") + f"{d.microsecond // 1000:03d}Z"


# --------------------------------------------------------------------------
# moto patches
# --------------------------------------------------------------------------

_PATCHED = False


def _is_deprecated(ami, now: _dt.datetime) -> bool:
    dep = getattr(ami, "deprecation_datetime", None)
    return dep is not None and dep <= now


def _patch_tag_lookup() -> None:
    """Speed only, same answers: moto looks up one resource's tags (every
    DescribeInstances item, every instance a node sync reads) by scanning the
    tags of every resource in the region, so a fleet of N instances costs N^2.
    A filter on exact resource ids alone reads those resources' tags directly;
    any other filter goes through moto's scan."""
    from moto.ec2.models.tags import TagBackend
    from moto.ec2.utils import EC2_PREFIX_TO_RESOURCE, get_prefix

    scan = TagBackend.describe_tags

    def describe_tags(self, filters=None):
        ids = (filters or {}).get("resource-id")
        exact = (
            filters is not None
            and set(filters) == {"resource-id"}
            and all(isinstance(i, str) and not any(ch in i for ch in "*?\\") for i in ids or [])
        )
        if not exact:
            return scan(self, filters)
        results = []
        for rid in dict.fromkeys(ids):
            tags = dict(self.tags.get(rid) or {})
            if not tags:
                continue
            rtype = EC2_PREFIX_TO_RESOURCE.get(get_prefix(rid), "")
            for key, value in tags.items():
                results.append({"resource_id": rid, "key": key, "value": value, "resource_type": rtype})
        return results

    TagBackend.describe_tags = describe_tags


_PATCH_LOCK = threading.RLock()


def apply_patches() -> None:
    """Patch moto once; a second caller waits until the first has finished."""
    global _PATCHED
    with _PATCH_LOCK:
        if _PATCHED:
            return
        try:
            _apply_patches()
        finally:
            _PATCHED = True  # once, even if a patch failed (its error is printed by the caller)


def _patch_subnet_addresses() -> None:
    """moto hands out a subnet's private addresses from one generator per subnet, which
    concurrent launches into that subnet (Auto Scaling groups scaling out at once) share:
    one of them fails with a 500 ("generator already executing"), where EC2 launches both.
    Address handout, reservation and release take one lock."""
    from moto.ec2.models.subnets import Subnet

    lock = threading.RLock()
    for name in ("get_available_subnet_ip", "request_ip", "del_subnet_ip"):
        original = getattr(Subnet, name)

        def locked(self, *args, _original=original, **kw):
            with lock:
                return _original(self, *args, **kw)

        setattr(Subnet, name, locked)


def _apply_patches() -> None:
    _patch_tag_lookup()
    _patch_subnet_addresses()
    import ec2_index  # instance, tag and volume lookups by index (same answers)

    ec2_index.apply_patches()
    import fast_serialize  # moto's response serializer: same bytes, less time

    fast_serialize.apply_patches()
    from moto.core.responses import ActionResult
    from moto.ec2.exceptions import InvalidAMIIdError, MalformedAMIIdError
    from moto.ec2.models.amis import Ami
    from moto.ec2.responses.amis import AmisResponse
    from moto.ec2.utils import generic_filter

    # Attributes picked up by moto's response serializer (DescribeImages shape
    # members DeprecationTime / ImageOwnerAlias / PlatformDetails / ...).
    Ami.deprecation_time = None
    Ami.deprecation_datetime = None
    Ami.image_owner_alias = property(lambda self: self.owner_alias)

    def describe_images(self):
        self.error_on_dryrun()
        ami_ids = self._get_param("ImageIds", []) or []
        filters = self._filters_from_querystring()
        owners = self._get_param("Owners", []) or []
        exec_users = self._get_param("ExecutableUsers", []) or []
        include_deprecated = bool(self._get_bool_param("IncludeDeprecated", False))
        backend = self.ec2_backend
        account = backend.account_id
        images = list(backend.amis.values())
        if ami_ids:
            malformed = [i for i in ami_ids if not i.startswith("ami-")]
            if malformed:
                raise MalformedAMIIdError(malformed)
            images = [a for a in images if a.id in ami_ids]
            deleted = [i for i in ami_ids if i in backend.deleted_amis]
            if not images and not deleted:
                raise InvalidAMIIdError(ami_ids)
        if exec_users:
            users = [account if u == "self" else u for u in exec_users]
            images = [
                a
                for a in images
                if a.is_public or any(lp.get("UserId") in users for lp in a.launch_permissions)
            ]
        if owners:
            wanted = [account if o == "self" else o for o in owners]
            images = [a for a in images if a.owner_id in wanted or (a.owner_alias and a.owner_alias in wanted)]
        if filters:
            images = generic_filter(filters, images)
        if not ami_ids and not include_deprecated:
            now = _dt.datetime.now(_dt.timezone.utc)
            images = [a for a in images if not (_is_deprecated(a, now) and a.owner_id != account)]
        return ActionResult({"Images": images})

    AmisResponse.describe_images = describe_images
    import lifecycle  # CompleteLifecycleAction / RecordLifecycleActionHeartbeat

    lifecycle.apply_patches()
    import eks_access  # cluster accessConfig, access entries
    import eks_updates  # UpdateNodegroupVersion, DescribeUpdate, backed node groups

    eks_updates.apply_patches()
    eks_access.apply_patches()
    import asg_fidelity  # SetDesiredCapacity bounds, scaling activities, capacity records

    asg_fidelity.apply_patches()
    import lt_pages  # DescribeLaunchTemplateVersions in pages with a NextToken

    lt_pages.apply_patches()
    import transactions  # TransactWriteItems backs up the items it names, not whole tables

    transactions.apply_patches()
    import instance_pages  # DescribeInstances pages count instances, as EC2's do

    instance_pages.apply_patches()
    import instance_status  # DescribeInstanceStatus: failed checks, scheduled events, pages

    instance_status.apply_patches()


# --------------------------------------------------------------------------
# backends
# --------------------------------------------------------------------------


def ec2_backend(region: str, account: str = ACCOUNT_ID):
    from moto.ec2.models import ec2_backends

    return ec2_backends[account][region]


def ssm_backend(region: str, account: str = ACCOUNT_ID):
    from moto.ssm.models import ssm_backends

    return ssm_backends[account][region]


def eks_backend(region: str, account: str = ACCOUNT_ID):
    from moto.eks.models import eks_backends

    return eks_backends[account][region]


def _import_ec2_fast() -> None:
    """Import moto's EC2 models with one shared boto3 Session.

    At import time moto builds its region list with three fresh boto3
    Sessions, each of which re-reads botocore's endpoint data. Sharing one
    Session for that import saves ~0.4 s per launcher start.
    """
    import sys

    if "moto.ec2.models" in sys.modules:
        return
    import boto3

    original = boto3.Session
    cached: list = []

    def session(*a, **k):
        if a or k:
            return original(*a, **k)
        if not cached:
            cached.append(original())
        return cached[0]

    boto3.Session = session
    try:
        import moto.ec2.models  # noqa: F401
    finally:
        boto3.Session = original


def import_and_patch() -> None:
    _import_ec2_fast()
    apply_patches()


def _warm_up_requests() -> list[tuple[str, str, bytes | None, dict]]:
    """One cheap request per service (method, path, body, headers): loads moto's per-service
    app, response classes and the backend of the default region."""
    auth = "AWS4-HMAC-SHA256 Credential=testing/20240101/{region}/{svc}/aws4_request, SignedHeaders=host, Signature=0"
    calls = [
        ("ec2", b"Action=DescribeImages&Version=2016-11-15&Owner.1=self", "application/x-www-form-urlencoded", None),
        ("ssm", b'{"Name": "/fakecloud/warm-up"}', "application/x-amz-json-1.1", "AmazonSSM.GetParameter"),
        ("autoscaling", b"Action=DescribeAutoScalingGroups&Version=2011-01-01", "application/x-www-form-urlencoded", None),
    ]
    out = []
    for svc, body, ctype, target in calls:
        headers = {"Authorization": auth.format(region=DEFAULT_REGION, svc=svc), "Content-Type": ctype}
        if target:
            headers["X-Amz-Target"] = target
        out.append(("POST", "/", body, headers))
    out.append(("GET", "/clusters", None, {"Authorization": auth.format(region=DEFAULT_REGION, svc="eks")}))
    return out


def warm_up(aws_url: str) -> None:
    """The warm-up requests, to the moto server at `aws_url`."""
    for method, path, body, headers in _warm_up_requests():
        req = urllib.request.Request(aws_url + path, data=body, headers=headers, method=method)
        try:
            urllib.request.urlopen(req, timeout=30).read()
        except Exception:
            pass  # e.g. ParameterNotFound: the point was the import


def warm_up_app(app) -> None:
    """The warm-up requests, straight to moto's WSGI `app` (no server, no thread)."""
    from werkzeug.test import Client

    client = Client(app)
    for method, path, body, headers in _warm_up_requests():
        client.open(path, method=method, data=body, headers=headers).close()


# --------------------------------------------------------------------------
# control ops
# --------------------------------------------------------------------------


def register(op, ControlError) -> None:  # noqa: N803 - class passed in
    import eks_access
    import eks_updates
    import lifecycle

    eks_updates.register(op, ControlError)
    lifecycle.register(op, ControlError)
    import bulk_seed  # seed_groups, moto_speedups

    bulk_seed.register(op, ControlError)
    import instance_status

    instance_status.register(op, ControlError)
    import spot_requests  # spot_request_set: an instance's Spot request and its status code

    spot_requests.register(op, ControlError)

    @op("put_parameter")
    def put_parameter(args):
        """Create or overwrite a String/StringList/SecureString parameter, any
        name including /aws/service/...; bumps Version like PutParameter."""
        from moto.core.utils import utcnow
        from moto.ssm.models import Parameter

        name = args["name"]
        value = args["value"]
        ptype = args.get("type", "String")
        if ptype not in ("String", "StringList", "SecureString"):
            raise ControlError(f"bad parameter type {ptype!r}")
        if not isinstance(value, str) or not value:
            raise ControlError("value must be a non-empty string")
        backend = ssm_backend(_region(args), _account(args))
        versions = backend._parameters[name]
        version = versions[-1].version + 1 if versions else 1
        versions.append(
            Parameter(
                account_id=_account(args),
                name=name,
                value=value,
                parameter_type=ptype,
                description=args.get("description"),
                allowed_pattern=None,
                keyid=None,
                last_modified_date=utcnow(),
                version=version,
                data_type=args.get("data_type", "text"),
                tier="Standard",
            )
        )
        if len(versions) > 100:
            versions.pop(0)
        return {"name": name, "version": version}

    @op("age_instances")
    def age_instances(args):
        """Backdates the launch time of the instances of Auto Scaling group `group`
        to `hours` ago (EC2 reports LaunchTime as when the instance started): the
        old nodes of a group nodecycle adopts. Returns {"instances": [ids]}."""
        import datetime

        from moto.autoscaling.models import autoscaling_backends
        from moto.core.utils import utcnow

        hours = args.get("hours")
        if not isinstance(hours, (int, float)) or hours < 0:
            raise ControlError("hours must be a number >= 0")
        groups = autoscaling_backends[_account(args)][_region(args)].autoscaling_groups
        group = groups.get(args.get("group"))
        if group is None:
            raise ControlError(f"no Auto Scaling group {args.get('group')!r}")
        launched = utcnow() - datetime.timedelta(hours=hours)
        ids = []
        for state in group.instance_states:
            state.instance.launch_time = launched
            ids.append(state.instance.id)
        return {"instances": sorted(ids)}

    @op("group_instances")
    def group_instances(args):
        """The instances of Auto Scaling group `group` as a kubelet would see its own
        machine: {"instances": [{id, zone, instanceType, imageId, privateIp, lifecycleState,
        state}]} sorted by id, every instance the group holds whatever its lifecycle state
        (the caller picks InService ones), and the group's desired, min and max sizes. For harnesses that make nodes follow a group (the
        real control plane's KWOK nodes, tests/src/controlplane.rs)."""
        from moto.autoscaling.models import autoscaling_backends

        groups = autoscaling_backends[_account(args)][_region(args)].autoscaling_groups
        group = groups.get(args.get("group"))
        if group is None:
            raise ControlError(f"no Auto Scaling group {args.get('group')!r}")
        out = []
        for s in group.instance_states:
            inst = s.instance
            zone = inst.placement.zone if hasattr(inst.placement, "zone") else str(inst.placement)
            out.append(
                {
                    "id": inst.id,
                    "zone": zone,
                    "instanceType": inst.instance_type,
                    "imageId": inst.image_id,
                    "privateIp": getattr(inst, "private_ip", None),
                    "lifecycleState": s.lifecycle_state,
                    "state": inst.state,
                }
            )
        return {"instances": sorted(out, key=lambda i: i["id"]), "desired": group.desired_capacity,
                "min": group.min_size, "max": group.max_size}

    @op("delete_parameter")
    def delete_parameter(args):
        name = args["name"]
        backend = ssm_backend(_region(args))
        existed = name in backend._parameters and bool(backend._parameters[name])
        backend._parameters.pop(name, None)
        return {"deleted": existed}

    @op("register_image")
    def register_image(args):
        """An AMI as the real DescribeImages returns it. Returns {"image_id"}."""
        _import_ec2_fast()
        apply_patches()
        from moto.ec2.models.amis import Ami

        region = _region(args)
        account = _account(args)
        backend = ec2_backend(region, account)
        image_id = args.get("id") or ("ami-" + secrets.token_hex(9)[:17])
        if not image_id.startswith("ami-"):
            raise ControlError(f"image id must start with ami-: {image_id!r}")
        name = args["name"]
        arch = args.get("architecture", "x86_64")
        if arch not in ("x86_64", "arm64", "i386", "x86_64_mac", "arm64_mac"):
            raise ControlError(f"bad architecture {arch!r}")
        owner = str(args.get("owner_id", account))
        alias = args.get("owner_alias")
        if owner == "self":
            owner = account
        elif owner == "amazon":
            owner, alias = AMAZON_OWNER_ID, alias or "amazon"
        elif owner == AMAZON_OWNER_ID and alias is None:
            alias = "amazon"
        creation = parse_rfc3339(args["creation_date"]) if args.get("creation_date") else None
        state = args.get("state", "available")
        tags = args.get("tags") or {}
        if not isinstance(tags, dict):
            raise ControlError("tags must be an object {key: value}")
        ami = Ami(
            backend,
            image_id,
            name=name,
            description=args.get("description", name),
            owner_id=owner,
            owner_alias=alias,
            public=bool(args.get("public", owner != account)),
            virtualization_type="hvm",
            architecture=arch,
            state=state,
            creation_date=creation,
            platform=None,
            image_location=f"{alias or owner}/{name}",
            hypervisor="xen",
            root_device_type="ebs",
            root_device_name="/dev/xvda",
            region_name=region,
            boot_mode=args.get("boot_mode", "uefi-preferred"),
            tags={str(k): str(v) for k, v in tags.items()},
        )
        ami.platform_details = "Linux/UNIX"
        ami.usage_operation = "RunInstances"
        ami.ena_support = True
        if args.get("deprecation_time"):
            dep = parse_rfc3339(args["deprecation_time"])
            ami.deprecation_datetime = dep
            ami.deprecation_time = ec2_time(dep)
        backend.amis[image_id] = ami
        if image_id in backend.deleted_amis:
            backend.deleted_amis.remove(image_id)
        return {"image_id": image_id}

    @op("deregister_image")
    def deregister_image(args):
        backend = ec2_backend(_region(args))
        backend.deregister_image(args["id"])
        return {}

    @op("create_cluster")
    def create_cluster(args):
        """An ACTIVE EKS cluster (same as CreateCluster, minus the role check)."""
        from moto.eks.models import Cluster

        region = _region(args)
        backend = eks_backend(region)
        name = args["name"]
        if name in backend.clusters:
            raise ControlError(f"cluster {name} already exists")
        cluster = Cluster(
            name=name,
            role_arn=args.get("role_arn", f"arn:aws:iam::{ACCOUNT_ID}:role/eks-cluster"),
            resources_vpc_config=args.get("resources_vpc_config")
            or {"subnetIds": [], "securityGroupIds": [], "endpointPublicAccess": True, "endpointPrivateAccess": False},
            account_id=ACCOUNT_ID,
            region_name=region,
            aws_partition="aws",
            version=args.get("version"),
            tags=args.get("tags") or {},
        )
        backend.clusters[name] = cluster
        backend.cluster_count += 1
        eks_access.set_authentication_mode(cluster, args.get("authentication_mode"))
        _set_cluster(cluster, args)
        return describe(cluster)

    def describe(cluster):
        return {
            "name": cluster.name,
            "version": cluster.version,
            "endpoint": cluster.endpoint,
            "ca_data": cluster.certificate_authority.get("data"),
            "status": cluster.status,
            "arn": cluster.arn,
            "authentication_mode": (getattr(cluster, "access_config", None) or {}).get("authenticationMode"),
        }

    def _set_cluster(cluster, args):
        if args.get("version") is not None:
            cluster.version = str(args["version"])
        if args.get("endpoint") is not None:
            cluster.endpoint = args["endpoint"]
        if args.get("ca_data") is not None:
            cluster.certificate_authority = {"data": args["ca_data"]}
        if args.get("status") is not None:
            cluster.status = args["status"]
        if args.get("platform_version") is not None:
            cluster.platformVersion = args["platform_version"]
        if args.get("authentication_mode") is not None:
            eks_access.set_authentication_mode(cluster, args["authentication_mode"])
        if args.get("endpoint_access") is not None:
            # resourcesVpcConfig's endpoint fields, as UpdateClusterConfig sets them.
            access = args["endpoint_access"]
            vpc = dict(cluster.resources_vpc_config or {})
            for key in ("endpointPublicAccess", "endpointPrivateAccess", "publicAccessCidrs"):
                if key in access:
                    vpc[key] = access[key]
            cluster.resources_vpc_config = vpc

    @op("set_cluster")
    def set_cluster(args):
        """Change an existing cluster: version (a control-plane upgrade),
        endpoint, ca_data (base64 PEM), status, platform_version, endpoint_access
        ({endpointPublicAccess, endpointPrivateAccess, publicAccessCidrs}); `account` (default
        the test account): the account the cluster is in."""
        backend = eks_backend(_region(args), _account(args))
        cluster = backend.clusters.get(args["name"])
        if cluster is None:
            raise ControlError(f"no EKS cluster {args['name']!r} in {_region(args)}")
        _set_cluster(cluster, args)
        return describe(cluster)

    @op("reset")
    def reset(args):
        """Empty every moto backend (like POST /moto-api/reset) and stop all
        Kubernetes stand-ins."""
        from moto.moto_api._internal.models import moto_api_backend

        try:
            import kube

            kube.reset_all()
        except ImportError:
            pass
        moto_api_backend.reset()
        lifecycle.reset()
        eks_updates.reset()
        import faults

        faults.reset()
        eks_access.reset()
        import asg_fidelity
        import autoscaler

        asg_fidelity.reset()
        autoscaler.reset()
        return {}

    @op("sqs_create_queue")
    def sqs_create_queue(args):
        """Create a standard SQS queue (where a test's EventBridge rule sends events);
        returns its ARN. moto's SQS, the one EventBridge targets deliver to."""
        from moto.sqs import sqs_backends

        queue = sqs_backends[ACCOUNT_ID][_region(args)].create_queue(args["name"])
        return {"arn": queue.queue_arn}

    @op("sqs_drain")
    def sqs_drain(args):
        """Every message body in the queue, oldest first, removing them (what a consumer
        would have received)."""
        from moto.sqs import sqs_backends

        backend = sqs_backends[ACCOUNT_ID][_region(args)]
        queue = backend.queues.get(args["name"])
        if queue is None:
            raise ControlError(f"no SQS queue {args['name']!r} in {_region(args)}")
        bodies = [m.body for m in queue._messages]
        queue._messages = []
        return {"messages": bodies}

    @op("access_entries")
    def access_entries(args):
        """A cluster's EKS access entries as stored (test aid)."""
        return {"entries": eks_access.entries_json(_region(args), args["cluster"])}

    @op("describe_images_raw")
    def describe_images_raw(args):
        """Debug aid: what the EC2 backend holds (ids, names, owners)."""
        backend = ec2_backend(_region(args))
        return {
            "images": [
                {"id": a.id, "name": a.name, "owner_id": a.owner_id, "owner_alias": a.owner_alias}
                for a in backend.amis.values()
            ]
        }

    _ = json  # keep import for debugging convenience
