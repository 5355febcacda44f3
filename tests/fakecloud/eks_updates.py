"""EKS managed node group updates for moto: UpdateNodegroupVersion, DescribeUpdate,
and node groups backed by a real Auto Scaling group.

moto's EKS has no ``UpdateNodegroupVersion`` / ``DescribeUpdate``, and its managed
node groups have nothing behind them (``resources.autoScalingGroups[0].name`` is
just ``eks-<uuid>``). This module adds, in-process:

* control op ``create_nodegroup``: an ACTIVE managed node group *and* its backing
  Auto Scaling group (moto launches the instances) launching from an EKS-owned
  launch template ``eks-<uuid>``, as EKS builds them;
* control op ``map_release``: which AMI an EKS AMI release version launches
  (real EKS knows this; the fake must be told);
* ``POST /clusters/{name}/node-groups/{nodegroupName}/update-version``
  (UpdateNodegroupVersion) and ``GET /clusters/{name}/updates/{updateId}``
  (DescribeUpdate), answered in EKS's REST-JSON wire format with moto's EKS
  exception classes (HTTP status + ``x-amzn-ErrorType`` + ``{"message": ...}``);
* UpdateNodegroupConfig (moto has it) made to refuse while a version update runs
  (409), report real ``params`` types, remember the update for DescribeUpdate and
  resize the backing Auto Scaling group;
* the rolling update behind a version update, driven by (fake) time: surge first,
  then drain (Eviction API, PodDisruptionBudgets) and replace old nodes, then scale
  back (``eks_rollout.py``); DescribeUpdate only reads it;
* control ops ``fail_update`` (inject a PodEvictionFailure) and ``nodegroup_calls``
  (what the code under test asked, in order).

Where the fake differs from real EKS is said at each place, and summarised in
README.md.
"""

from __future__ import annotations

import copy
import datetime as _dt
import json
import re
import threading
import uuid

import eks_rollout
from aws_fixtures import ACCOUNT_ID, DEFAULT_REGION

# One lock for all state here: moto serves requests on several threads and the
# control server on another.
_LOCK = threading.RLock()

# region -> releaseVersion -> {"image": ami, "kubernetesVersion": "1.30" | None}, in mapping order.
_RELEASES: dict[str, dict[str, dict]] = {}

# (region, cluster, nodegroup) -> _GroupState
_GROUPS: dict[tuple[str, str, str], "_GroupState"] = {}

DEFAULT_AMI_TYPE = "AL2023_x86_64_STANDARD"
DEFAULT_INSTANCE_TYPE = "m5.large"
DEFAULT_FAIL_CODE = "PodEvictionFailure"


def _region(args: dict) -> str:
    return args.get("region") or DEFAULT_REGION


def _now() -> _dt.datetime:
    from moto.core.utils import utcnow

    return utcnow()


def _kube_minor(release: str) -> str | None:
    """The Kubernetes minor an EKS-optimized AMI release is for:
    1.30.4-20241024 -> 1.30. Bottlerocket-style versions do not say; None."""
    m = re.match(r"^(\d+\.\d+)\.\d+-", release or "")
    return m.group(1) if m else None


def _version_key(v: str) -> tuple:
    try:
        return tuple(int(x) for x in str(v).split(".")[:2])
    except ValueError:
        return (0, 0)


def _natural_key(s: str) -> list:
    """Sort key for release versions: 1.30.10-20241101 after 1.30.9-20241024."""
    parts = re.split(r"(\d+)", s)
    return [int(p) if i % 2 else p for i, p in enumerate(parts)]


# --------------------------------------------------------------------------
# state
# --------------------------------------------------------------------------


class _Update:
    """One EKS update (``Update`` shape) plus what the fake needs to run it."""

    def __init__(self, kind: str, params: list, token: str | None, status: str = "InProgress"):
        self.id = str(uuid.uuid4())
        self.type = kind  # VersionUpdate | ConfigUpdate
        self.status = status
        self.params = params
        self.created_at = _now()
        self.errors: list = []
        self.token = token
        # VersionUpdate targets
        self.target_image: str | None = None
        self.target_release: str | None = None
        self.target_version: str | None = None
        self.target_lt_version: str | None = None  # of the customer's launch template
        self.lt_data: dict | None = None  # that version's LaunchTemplateData
        self.force = False
        self.pointed = False  # backing ASG switched to the target image
        self.previous_eks_lt_version: str | None = None
        self.rollout = None  # eks_rollout.Rollout: how far the rolling update got

    def wire(self) -> dict:
        return {
            "id": self.id,
            "status": self.status,
            "type": self.type,
            "params": [dict(p) for p in self.params],
            "createdAt": self.created_at,
            "errors": [dict(e) for e in self.errors],
        }

    def wire_json(self) -> dict:
        """For the control API (plain JSON)."""
        w = self.wire()
        w["createdAt"] = self.created_at.replace(tzinfo=_dt.timezone.utc).timestamp()
        return w


class _GroupState:
    """What the fake knows about one managed node group beyond moto's model."""

    def __init__(self):
        self.asg: str | None = None  # backing Auto Scaling group
        self.eks_lt_id: str | None = None  # EKS-owned launch template eks-<uuid>
        self.calls: list[dict] = []
        self.updates: list[_Update] = []
        self.waves: list[dict] = []
        self.timeline: list[dict] = []  # rollout events (eks_rollout.py)
        self.pending_failure: dict | None = None

    def in_progress(self) -> _Update | None:
        for u in self.updates:
            if u.type == "VersionUpdate" and u.status == "InProgress":
                return u
        return None

    def by_token(self, token: str | None) -> _Update | None:
        if not token:
            return None
        for u in self.updates:
            if u.token == token:
                return u
        return None

    def by_id(self, update_id: str) -> _Update | None:
        for u in self.updates:
            if u.id == update_id:
                return u
        return None


def _state(region: str, cluster: str, nodegroup: str) -> _GroupState:
    key = (region, cluster, nodegroup)
    st = _GROUPS.get(key)
    if st is None:
        st = _GROUPS[key] = _GroupState()
    return st


def reset() -> None:
    """Forget every release mapping, update, call log (the `reset` op)."""
    with _LOCK:
        _RELEASES.clear()
        _GROUPS.clear()
    eks_rollout.reset()


# --------------------------------------------------------------------------
# backends and EKS errors
# --------------------------------------------------------------------------


def _eks(account: str, region: str):
    from moto.eks.models import eks_backends

    return eks_backends[account][region]


def _ec2(account: str, region: str):
    from moto.ec2.models import ec2_backends

    return ec2_backends[account][region]


def _asgs(account: str, region: str):
    from moto.autoscaling.models import autoscaling_backends

    return autoscaling_backends[account][region]


def _error(cls_name: str, cluster: str | None, nodegroup: str | None, message: str):
    """One of moto's EKS exceptions: HTTP status, `x-amzn-ErrorType` header and
    a JSON body {clusterName?, nodegroupName?, message} as EKS sends it
    (members without a value are left out rather than sent as null)."""
    from moto.eks import exceptions

    fields = {"clusterName": cluster, "nodegroupName": nodegroup}
    return getattr(exceptions, cls_name)(**{k: v for k, v in fields.items() if v is not None}, message=message)


def _not_found(cluster: str | None, nodegroup: str | None, message: str):
    return _error("ResourceNotFoundException", cluster, nodegroup, message)  # 404


def _invalid(cluster: str, nodegroup: str, message: str):
    return _error("InvalidParameterException", cluster, nodegroup, message)  # 400


def _in_use(cluster: str, nodegroup: str, message: str):
    return _error("ResourceInUseException", cluster, nodegroup, message)  # 409


def _find(account: str, region: str, cluster_name: str, nodegroup_name: str | None):
    """(cluster, nodegroup) or the ResourceNotFoundException EKS answers with
    (moto's messages, which were taken from the real API)."""
    from moto.eks.models import CLUSTER_NOT_FOUND_MSG, NODEGROUP_NOT_FOUND_MSG

    cluster = _eks(account, region).clusters.get(cluster_name)
    if cluster is None:
        raise _not_found(None, None, CLUSTER_NOT_FOUND_MSG.format(clusterName=cluster_name))
    if nodegroup_name is None:
        return cluster, None
    ng = cluster.nodegroups.get(nodegroup_name)
    if ng is None:
        raise _not_found(cluster_name, nodegroup_name, NODEGROUP_NOT_FOUND_MSG.format(nodegroupName=nodegroup_name))
    return cluster, ng


def _busy(cluster: str, nodegroup: str, kind: str, running: _Update):
    # Modelled on EKS's cluster message "Cannot EndpointAccessUpdate because
    # cluster X currently has update <id> in progress".
    return _in_use(
        cluster, nodegroup, f"Cannot {kind} because nodegroup {nodegroup} currently has update {running.id} in progress"
    )


def _json_body(response) -> dict:
    raw = response.body
    if isinstance(raw, bytes):
        raw = raw.decode("utf-8", "replace")
    if not raw:
        return {}
    try:
        body = json.loads(raw)
    except ValueError:
        return {}
    return body if isinstance(body, dict) else {}


def _record(st: _GroupState, op: str, body: dict, fn):
    """Run fn(), logging {op, body, status} whatever it answers."""
    from moto.core.exceptions import JsonRESTError

    status = 500
    try:
        result = fn()
        status = 200
        return result
    except JsonRESTError as e:
        status = int(getattr(e, "code", 400) or 400)
        raise
    finally:
        st.calls.append({"op": op, "body": body, "status": status})


# --------------------------------------------------------------------------
# launch templates and the backing Auto Scaling group
# --------------------------------------------------------------------------


def _resolve_lt_version(template, version) -> int | None:
    """A launch template version as EKS accepts it: a number, $Latest,
    $Default, or None (= the default version). None when it does not exist."""
    if version is None or str(version) == "$Default":
        return template.default_version_number
    if str(version) == "$Latest":
        return template.latest_version_number
    try:
        n = int(str(version))
    except ValueError:
        return None
    return n if 1 <= n <= len(template.versions) else None


def _in_service(group) -> list:
    """InService instances of an ASG that EC2 still runs (pending/running)."""
    if group is None:
        return []
    return [
        s for s in group.instance_states if s.lifecycle_state == "InService" and s.instance.state in ("pending", "running")
    ]


def _group_of(account: str, region: str, st: _GroupState):
    if not st.asg:
        return None
    return _asgs(account, region).autoscaling_groups.get(st.asg)


def _follow_kube(region: str, cluster: str, asg_name: str | None) -> None:
    """Make the Kubernetes stand-in of `cluster` (if any) follow EC2 now, like
    the kubelet registering new nodes and the cloud node-lifecycle controller
    deleting the nodes of terminated instances.

    With `sync_nodes` configured that is one sync pass (and, when it follows
    another Auto Scaling group, one more over the backing ASG with the same
    settings). Without it, one pass restricted to the backing ASG (plus
    instances already synced); nodes added
    by hand whose providerID names an instance are adopted first, so they are
    removed with their instance instead of being duplicated."""
    try:
        import kube
    except ImportError:
        return
    with kube._CLUSTERS_LOCK:
        c = kube.CLUSTERS.get((region, cluster))
    if c is None or c.stopped:
        return
    with c.lock:
        configured = c.sync
        if configured is not None:
            c.sync_nodes_once()
            if not configured.get("asg") or configured.get("asg") == asg_name:
                return
        if not asg_name:
            return
        for (_, name), node in list(c.store["nodes"].items()):
            pid = ((node.get("spec") or {}).get("providerID") or "").rsplit("/", 1)[-1]
            if pid.startswith("i-") and pid not in c.synced_instances:
                c.synced_instances[pid] = name
        # sync_nodes follows another group: one pass over this one, with its settings.
        c.sync = dict(configured or {"ready": True}, asg=asg_name)
        try:
            c.sync_nodes_once()
        finally:
            c.sync = configured


def _default_subnet(ec2, region: str, wanted: str | None):
    subnets = list(ec2.describe_subnets())
    if wanted:
        for s in subnets:
            if s.id == wanted:
                return s
        raise ValueError(f"no subnet {wanted} in {region}")
    defaults = [s for s in subnets if str(getattr(s, "default_for_az", "")).lower() == "true"]
    for s in defaults:
        if s.availability_zone == f"{region}a":
            return s
    if defaults:
        return defaults[0]
    if subnets:
        return subnets[0]
    # Someone deleted the default VPC: make one like EC2's CreateDefaultVpc.
    ec2.create_default_vpc()
    subnets = list(ec2.describe_subnets())
    if not subnets:
        raise ValueError(f"no subnet in {region} to launch the node group into")
    return subnets[0]


# --------------------------------------------------------------------------
# UpdateNodegroupVersion
# --------------------------------------------------------------------------


def _current_image(account: str, region: str, st: _GroupState) -> str | None:
    group = _group_of(account, region, st)
    if group is None or group.ec2_launch_template is None:
        return None
    return group.image_id


def _start_version_update(account: str, region: str, cluster_name: str, ng_name: str, body: dict) -> _Update:
    """UpdateNodegroupVersion, validated like EKS (see the README for the messages)."""
    cluster, ng = _find(account, region, cluster_name, ng_name)
    st = _state(region, cluster_name, ng_name)

    token = body.get("clientRequestToken")
    earlier = st.by_token(token)
    if earlier is not None:
        # EKS: a retried request with the same token is the same update.
        return earlier
    running = st.in_progress()
    if running is not None:
        raise _busy(cluster_name, ng_name, "VersionUpdate", running)

    req_version = body.get("version")
    req_release = body.get("releaseVersion")
    req_lt = body.get("launchTemplate")
    custom_ami = ng.ami_type == "CUSTOM"

    def invalid(msg):
        return _invalid(cluster_name, ng_name, msg)

    if req_lt is not None and not ng.launch_template:
        raise invalid(
            f"Nodegroup {ng_name} was not created with a launch template; a launch template cannot be specified for it"
        )
    if custom_ami and req_version and req_version != ng.version:
        raise invalid("You cannot specify a kubernetes version to use when specifying an image id to use within the launch template.")
    if custom_ami and req_release:
        raise invalid("You cannot specify a release version to use when specifying an image id to use within the launch template.")
    if req_version and req_version not in (str(cluster.version), str(ng.version)):
        raise invalid(
            f"Nodegroup Kubernetes version should be equal to Cluster kubernetes version {cluster.version} "
            f"or NodeGroup kubernetes version {ng.version}"
        )

    # The customer's launch template version, when one is given.
    current_lt_version = str(ng.launch_template["version"]) if ng.launch_template else None
    target_lt_version = current_lt_version
    lt_data = None
    if req_lt is not None:
        if not isinstance(req_lt, dict):
            raise invalid("launchTemplate must be an object")
        if req_lt.get("id") and req_lt["id"] != ng.launch_template.get("id"):
            raise invalid(f"Launch template {req_lt['id']} is not the launch template of nodegroup {ng_name}; only its version can be changed")
        if req_lt.get("name") and req_lt["name"] != ng.launch_template.get("name"):
            raise invalid(f"Launch template {req_lt['name']} is not the launch template of nodegroup {ng_name}; only its version can be changed")
        ec2 = _ec2(account, region)
        template = ec2.launch_templates.get(ng.launch_template.get("id"))
        if template is None:
            raise invalid(f"Launch template {ng.launch_template.get('id')} does not exist")
        n = _resolve_lt_version(template, req_lt.get("version"))
        if n is None:
            raise invalid(f"Launch template version {req_lt.get('version')} does not exist for launch template {template.id}")
        target_lt_version = str(n)
        lt_data = template.get_version(n).data

    # Kubernetes version and AMI release.
    releases = _RELEASES.get(region, {})
    if custom_ami:
        target_version = str(ng.version)
        target_image = (lt_data or {}).get("ImageId") or _current_image(account, region, st)
        target_release = target_image or ng.release_version  # CUSTOM: EKS reports the AMI id
    else:
        if req_release:
            info = releases.get(req_release)
            kv = req_version or (info or {}).get("kubernetesVersion") or str(ng.version)
            if (
                info is None
                or (info.get("kubernetesVersion") and info["kubernetesVersion"] != kv)
                or _version_key(kv) > _version_key(cluster.version)
            ):
                raise invalid(f"Requested release version {req_release} is not valid for kubernetes version {kv}.")
            target_release, target_version = req_release, kv
        elif req_lt is not None and not req_version:
            # A launch template version change keeps the AMI release.
            target_release, target_version = ng.release_version, str(ng.version)
        else:
            # EKS: the latest AMI release for `version`, default the cluster's version.
            target_version = str(req_version or cluster.version)
            candidates = [r for r, i in releases.items() if (i.get("kubernetesVersion") or _kube_minor(r)) == target_version]
            if candidates:
                target_release = max(candidates, key=_natural_key)
            elif target_version == str(ng.version):
                target_release = ng.release_version
            else:
                raise invalid(f"Requested release version is not valid for kubernetes version {target_version}.")
        target_image = (lt_data or {}).get("ImageId")
        if not target_image:
            info = releases.get(target_release)
            target_image = info["image"] if info else _current_image(account, region, st)

    if (
        target_release == ng.release_version
        and target_version == str(ng.version)
        and target_lt_version == current_lt_version
    ):
        if req_lt is not None:
            raise invalid(f"Nodegroup is already at launch template version {current_lt_version}")
        raise invalid(f"Nodegroup is already at release version {ng.release_version}")

    params = []
    if not custom_ami:
        params += [{"type": "Version", "value": target_version}, {"type": "ReleaseVersion", "value": target_release}]
    if req_lt is not None:
        params += [
            {"type": "LaunchTemplateName", "value": ng.launch_template.get("name")},
            {"type": "LaunchTemplateVersion", "value": target_lt_version},
        ]
    upd = _Update("VersionUpdate", params, token)
    upd.target_image = target_image
    upd.target_release = target_release
    upd.target_version = target_version
    upd.target_lt_version = target_lt_version
    upd.lt_data = lt_data
    upd.force = bool(body.get("force"))
    st.updates.append(upd)
    ng.status = "UPDATING"
    ng.modified_at = _now()
    return upd


# --------------------------------------------------------------------------
# moto response handlers
# --------------------------------------------------------------------------


def _update_nodegroup_version(self):
    """EKSResponse.update_nodegroup_version (moto: not implemented)."""
    from moto.core.responses import ActionResult

    body = _json_body(self)
    cluster_name = self._get_param("name")
    ng_name = self._get_param("nodegroupName")
    with _LOCK:
        st = _state(self.region, cluster_name, ng_name)
        upd = _record(
            st,
            "UpdateNodegroupVersion",
            body,
            lambda: _start_version_update(self.current_account, self.region, cluster_name, ng_name, body),
        )
        return ActionResult({"update": upd.wire()})


def _describe_update(self):
    """EKSResponse.describe_update (moto: not implemented). Node group updates
    only (`nodegroupName` given); cluster and add-on updates are not modelled
    and answer 404."""
    from moto.core.responses import ActionResult

    cluster_name = self._get_param("name")
    update_id = self._get_param("updateId")
    ng_name = self._get_param("nodegroupName") or None
    body = {"updateId": update_id, "nodegroupName": ng_name}
    account, region = self.current_account, self.region

    def run():
        cluster, ng = _find(account, region, cluster_name, ng_name)
        st = _GROUPS.get((region, cluster_name, ng_name)) if ng_name else None
        upd = st.by_id(update_id) if st else None
        if upd is None:
            raise _not_found(cluster_name, ng_name, f"No update found for ID: {update_id}")
        return upd  # read only: the rollout moves with time (eks_rollout.py)

    with _LOCK:
        if ng_name:
            st = _state(region, cluster_name, ng_name)
            upd = _record(st, "DescribeUpdate", body, run)
            st.calls[-1]["updateStatus"] = upd.status  # what this call answered
        else:
            upd = run()
        return ActionResult({"update": upd.wire()})


def _config_params(body: dict) -> list:
    """UpdateNodegroupConfig's `params` as EKS reports them (UpdateParamType)."""
    params = []
    labels = body.get("labels") or {}
    if labels.get("addOrUpdateLabels"):
        params.append({"type": "LabelsToAdd", "value": json.dumps(labels["addOrUpdateLabels"])})
    if labels.get("removeLabels"):
        params.append({"type": "LabelsToRemove", "value": json.dumps(labels["removeLabels"])})
    taints = body.get("taints") or {}
    if taints.get("addOrUpdateTaints"):
        params.append({"type": "TaintsToAdd", "value": json.dumps(taints["addOrUpdateTaints"])})
    if taints.get("removeTaints"):
        params.append({"type": "TaintsToRemove", "value": json.dumps(taints["removeTaints"])})
    scaling = body.get("scalingConfig") or {}
    for key, kind in (("minSize", "MinSize"), ("maxSize", "MaxSize"), ("desiredSize", "DesiredSize")):
        if scaling.get(key) is not None:
            params.append({"type": kind, "value": str(scaling[key])})
    uc = body.get("updateConfig") or {}
    if uc.get("maxUnavailable") is not None:
        params.append({"type": "MaxUnavailable", "value": str(uc["maxUnavailable"])})
    if uc.get("maxUnavailablePercentage") is not None:
        params.append({"type": "MaxUnavailablePercentage", "value": str(uc["maxUnavailablePercentage"])})
    if uc.get("updateStrategy") is not None:
        params.append({"type": "UpdateStrategy", "value": str(uc["updateStrategy"])})
    repair = body.get("nodeRepairConfig") or {}
    if repair.get("enabled") is not None:
        params.append({"type": "NodeRepairEnabled", "value": str(bool(repair["enabled"])).lower()})
    return params


def _wrap_update_nodegroup_config(original):
    def update_nodegroup_config(self):
        """moto's UpdateNodegroupConfig, plus: 409 while a version update runs,
        clientRequestToken idempotency, basic validation, EKS `params` types,
        the update remembered for DescribeUpdate (status Successful: applied
        synchronously, where EKS reports InProgress for a short while), the
        scaling config applied to the backing ASG."""
        from moto.core.responses import ActionResult

        body = _json_body(self)
        cluster_name = self._get_param("name")
        ng_name = self._get_param("nodegroupName")
        account, region = self.current_account, self.region

        def run():
            _, ng = _find(account, region, cluster_name, ng_name)
            st = _state(region, cluster_name, ng_name)
            earlier = st.by_token(body.get("clientRequestToken"))
            if earlier is not None:
                return earlier
            running = st.in_progress()
            if running is not None:
                raise _busy(cluster_name, ng_name, "ConfigUpdate", running)
            uc = body.get("updateConfig") or {}
            if uc.get("maxUnavailable") is not None and uc.get("maxUnavailablePercentage") is not None:
                raise _invalid(cluster_name, ng_name, "Only one of maxUnavailable and maxUnavailablePercentage can be specified")
            scaling = dict(ng.scaling_config or {})
            scaling.update({k: v for k, v in (body.get("scalingConfig") or {}).items() if v is not None})
            lo, want, hi = scaling.get("minSize", 0), scaling.get("desiredSize", 0), scaling.get("maxSize", 0)
            if not (lo <= want <= hi):
                raise _invalid(
                    cluster_name, ng_name,
                    f"Desired size {want} must be between minimum size {lo} and maximum size {hi}",
                )
            params = _config_params(body)
            if not params:
                raise _invalid(cluster_name, ng_name, "No changes needed")
            if body.get("scalingConfig"):
                # moto updates the node group's dict in place; give each node group its own.
                ng.scaling_config = dict(ng.scaling_config or {})
            before = dict(ng.update_config or {})
            original(self)
            if body.get("updateConfig"):
                # EKS changes only the fields given (moto replaced the whole updateConfig, so a
                # maxUnavailable change dropped updateStrategy); the two sizes exclude each other.
                merged = {k: v for k, v in before.items() if v is not None}
                if uc.get("maxUnavailable") is not None or uc.get("maxUnavailablePercentage") is not None:
                    merged.pop("maxUnavailable", None)
                    merged.pop("maxUnavailablePercentage", None)
                merged.update({k: v for k, v in uc.items() if v is not None})
                ng.update_config = merged
            upd = _Update("ConfigUpdate", params, body.get("clientRequestToken"), status="Successful")
            st.updates.append(upd)
            group = _group_of(account, region, st)
            if group is not None and body.get("scalingConfig"):
                sc = ng.scaling_config
                group.min_size = int(sc.get("minSize", group.min_size))
                group.max_size = int(sc.get("maxSize", group.max_size))
                group.set_desired_capacity(int(sc.get("desiredSize", group.desired_capacity)))
                _follow_kube(region, cluster_name, st.asg)
            return upd

        with _LOCK:
            upd = _record(_state(region, cluster_name, ng_name), "UpdateNodegroupConfig", body, run)
            return ActionResult({"update": upd.wire()})

    return update_nodegroup_config


def _wrap_delete_nodegroup(original):
    def delete_nodegroup(self, cluster_name: str, nodegroup_name: str):
        """moto's DeleteNodegroup, plus what EKS deletes with the node group:
        its Auto Scaling group (instances terminated) and launch template.
        EKS answers DELETING and takes minutes; the fake deletes at once."""
        ng = original(self, cluster_name, nodegroup_name)
        with _LOCK:
            st = _GROUPS.pop((self.region_name, cluster_name, nodegroup_name), None)
            if st is not None:
                asgs = _asgs(self.account_id, self.region_name)
                if st.asg in asgs.autoscaling_groups:
                    asgs.delete_auto_scaling_group(st.asg)
                ec2 = _ec2(self.account_id, self.region_name)
                if st.eks_lt_id in ec2.launch_templates:
                    ec2.delete_launch_template(None, st.eks_lt_id)
                _follow_kube(self.region_name, cluster_name, st.asg)
        return ng

    return delete_nodegroup


def _wrap_create_nodegroup(original):
    def create_nodegroup(self):
        """moto's CreateNodegroup, plus `updateConfig` (moto drops it; EKS
        defaults it to {"maxUnavailable": 1}) and no invented `remoteAccess`
        when none was asked for. Such node groups have no backing Auto Scaling
        group: use the `create_nodegroup` control op for one."""
        result = original(self)
        body = _json_body(self)
        ng = result.result["nodegroup"]
        ng.update_config = body.get("updateConfig") or {"maxUnavailable": 1}
        if not body.get("remoteAccess"):
            ng.remote_access = None
        if body.get("scalingConfig"):
            ng.scaling_config = dict(ng.scaling_config)
        return result

    return create_nodegroup


_PATCHED = False


def apply_patches() -> None:
    """Add the routes and handlers to moto's EKS (before its app is built)."""
    global _PATCHED
    if _PATCHED:
        return
    _PATCHED = True
    import moto.eks.urls as eks_urls
    from moto.eks.models import EKSBackend
    from moto.eks.responses import EKSResponse

    dispatch = eks_urls.response.dispatch
    eks_urls.url_paths.setdefault(
        "{0}/clusters/(?P<name>[^/]+)/node-groups/(?P<nodegroupName>[^/]+)/update-version$", dispatch
    )
    eks_urls.url_paths.setdefault("{0}/clusters/(?P<name>[^/]+)/updates/(?P<updateId>[^/]+)$", dispatch)
    EKSResponse.update_nodegroup_version = _update_nodegroup_version
    EKSResponse.describe_update = _describe_update
    EKSResponse.update_nodegroup_config = _wrap_update_nodegroup_config(EKSResponse.update_nodegroup_config)
    EKSResponse.create_nodegroup = _wrap_create_nodegroup(EKSResponse.create_nodegroup)
    EKSBackend.delete_nodegroup = _wrap_delete_nodegroup(EKSBackend.delete_nodegroup)
    eks_rollout.ensure_ticker()


# --------------------------------------------------------------------------
# control ops
# --------------------------------------------------------------------------


def register(op, ControlError) -> None:  # noqa: N803 - class passed in
    eks_rollout.register(op, ControlError)

    def ensure_moto():
        import aws_fixtures

        aws_fixtures.import_and_patch()

    @op("map_release")
    def map_release(args):
        """EKS AMI release version -> AMI (what EKS knows for each amiType and
        region). `kubernetesVersion` defaults to the 1.NN prefix of the
        release (1.30.4-20241024 -> 1.30); releases without one match any."""
        release = args["releaseVersion"]
        image = args["image"]
        if not isinstance(release, str) or not release:
            raise ControlError("releaseVersion must be a non-empty string")
        if not isinstance(image, str) or not image.startswith("ami-"):
            raise ControlError(f"image must be an AMI id: {image!r}")
        kv = args.get("kubernetesVersion") or _kube_minor(release)
        with _LOCK:
            _RELEASES.setdefault(_region(args), {})[release] = {"image": image, "kubernetesVersion": kv}
        return {"releaseVersion": release, "image": image, "kubernetesVersion": kv}

    @op("create_nodegroup")
    def create_nodegroup(args):
        """An ACTIVE managed node group and its backing Auto Scaling group
        (see README.md). Returns {asg, arn, launchTemplateId, instances,
        releaseVersion, amiType}."""
        ensure_moto()
        from moto.eks.models import Nodegroup

        region = _region(args)
        cluster_name = args["cluster"]
        name = args["nodegroup"]
        eks = _eks(ACCOUNT_ID, region)
        cluster = eks.clusters.get(cluster_name)
        if cluster is None:
            raise ControlError(f"no EKS cluster {cluster_name!r} in {region} (create_cluster first)")
        if name in cluster.nodegroups:
            raise ControlError(f"node group {name!r} already exists in cluster {cluster_name}")
        size = int(args.get("size", 3))
        lo = int(args.get("min", 0))
        hi = int(args.get("max", size + 3))
        if not (0 <= lo <= size <= hi):
            raise ControlError(f"need 0 <= min ({lo}) <= size ({size}) <= max ({hi})")
        if args.get("maxUnavailablePercentage") is not None:
            update_config = {"maxUnavailablePercentage": int(args["maxUnavailablePercentage"])}
        else:
            update_config = {"maxUnavailable": int(args.get("maxUnavailable", 1))}
        instance_type = args.get("instanceType") or DEFAULT_INSTANCE_TYPE
        version = str(args.get("version") or cluster.version)
        ec2 = _ec2(ACCOUNT_ID, region)

        # The customer's launch template, if any.
        lt_spec = args.get("launchTemplate")
        user_lt = None
        lt_data: dict = {}
        lt_version = None
        if lt_spec is not None:
            if not isinstance(lt_spec, dict) or not (lt_spec.get("id") or lt_spec.get("name")):
                raise ControlError("launchTemplate must be {id or name, version?}")
            try:
                user_lt = (
                    ec2.get_launch_template(lt_spec["id"]) if lt_spec.get("id")
                    else ec2.get_launch_template_by_name(lt_spec["name"])
                )
            except Exception as e:
                raise ControlError(f"launch template {lt_spec}: {e}")
            n = _resolve_lt_version(user_lt, lt_spec.get("version"))
            if n is None:
                raise ControlError(f"launch template {user_lt.id} has no version {lt_spec.get('version')!r}")
            lt_version = str(n)
            lt_data = user_lt.get_version(n).data

        image = args.get("image")
        release = args.get("releaseVersion")
        ami_type = args.get("amiType")
        releases = _RELEASES.setdefault(region, {})
        if lt_data.get("ImageId"):
            if ami_type not in (None, "CUSTOM"):
                raise ControlError("You cannot specify an AMI Type other than CUSTOM, when specifying an image id in your launch template.")
            if image and image != lt_data["ImageId"]:
                raise ControlError(f"image {image} differs from the launch template's ImageId {lt_data['ImageId']}")
            ami_type = "CUSTOM"
            image = lt_data["ImageId"]
            release = release or image
        else:
            ami_type = ami_type or DEFAULT_AMI_TYPE
            mapped = releases.get(release) if release else None
            if image is None:
                if mapped is None:
                    raise ControlError("give `image`, or a `releaseVersion` mapped with map_release")
                image = mapped["image"]
            elif mapped is not None and mapped["image"] != image:
                raise ControlError(f"release {release} is mapped to {mapped['image']}, not {image}")
            if release is None:
                known = [r for r, i in releases.items() if i["image"] == image]
                release = known[-1] if known else f"{version}.0-20200101"
            if release not in releases:
                releases[release] = {"image": image, "kubernetesVersion": _kube_minor(release)}

        subnet = _default_subnet(ec2, region, args.get("subnet"))
        ngo = Nodegroup(
            cluster_name=cluster_name,
            node_role=args.get("nodeRole") or f"arn:aws:iam::{ACCOUNT_ID}:role/eks-node",
            nodegroup_name=name,
            subnets=[subnet.id],
            account_id=ACCOUNT_ID,
            region_name=region,
            aws_partition="aws",
            scaling_config={"minSize": lo, "maxSize": hi, "desiredSize": size},
            instance_types=[lt_data.get("InstanceType") or instance_type],
            ami_type=ami_type,
            labels=args.get("labels") or {},
            tags=args.get("tags") or {},
            version=version,
            release_version=release,
            update_config=update_config,
        )
        # EKS names them eks-<nodegroup>-<uuid> (ASG) and eks-<uuid> (launch template).
        asg_name = f"eks-{name}-{ngo.uuid}"
        ngo.resources = {"autoScalingGroups": [{"name": asg_name}]}
        ngo.remote_access = None  # not configured
        # EKS node auto repair ({"enabled": true}), as CreateNodegroup takes it.
        ngo.node_repair_config = args.get("nodeRepairConfig")
        if user_lt is not None:
            ngo.launch_template = {"name": user_lt.name, "id": user_lt.id, "version": lt_version}
            ngo.disk_size = None  # in the launch template

        data = copy.copy(lt_data)
        data["ImageId"] = image
        data.setdefault("InstanceType", instance_type)
        eks_lt = ec2.create_launch_template(
            f"eks-{ngo.uuid}",
            "",
            data,
            {"launch-template": {"eks:cluster-name": cluster_name, "eks:nodegroup-name": name}},
        )
        tags = {
            "eks:cluster-name": cluster_name,
            "eks:nodegroup-name": name,
            f"kubernetes.io/cluster/{cluster_name}": "owned",
        }
        asg_tags = [{"Key": k, "Value": v, "PropagateAtLaunch": True} for k, v in tags.items()]
        asg_tags += [
            {"Key": "k8s.io/cluster-autoscaler/enabled", "Value": "true", "PropagateAtLaunch": False},
            {"Key": f"k8s.io/cluster-autoscaler/{cluster_name}", "Value": "owned", "PropagateAtLaunch": False},
        ]
        try:
            _asgs(ACCOUNT_ID, region).create_auto_scaling_group(
                name=asg_name,
                availability_zones=[],
                desired_capacity=size,
                max_size=hi,
                min_size=lo,
                launch_config_name=None,
                launch_template={"LaunchTemplateId": eks_lt.id, "Version": "1"},
                vpc_zone_identifier=subnet.id,
                default_cooldown=None,
                health_check_period=None,
                health_check_type="EC2",
                load_balancers=[],
                target_group_arns=[],
                placement_group=None,
                termination_policies=[],
                tags=asg_tags,
            )
        except Exception as e:
            ec2.delete_launch_template(None, eks_lt.id)
            raise ControlError(f"creating the backing Auto Scaling group: {type(e).__name__}: {e}")
        with _LOCK:
            cluster.nodegroups[name] = ngo
            cluster.nodegroup_count += 1
            st = _GROUPS[(region, cluster_name, name)] = _GroupState()
            st.asg = asg_name
            st.eks_lt_id = eks_lt.id
        _follow_kube(region, cluster_name, asg_name)
        group = _asgs(ACCOUNT_ID, region).autoscaling_groups[asg_name]
        return {
            "asg": asg_name,
            "arn": ngo.arn,
            "launchTemplateId": eks_lt.id,
            "instances": [s.instance.id for s in group.instance_states],
            "releaseVersion": release,
            "amiType": ami_type,
        }

    def group_state(args) -> tuple[str, str, str, _GroupState]:
        region = _region(args)
        cluster, ng = args["cluster"], args["nodegroup"]
        c = _eks(ACCOUNT_ID, region).clusters.get(cluster)
        if c is None or ng not in c.nodegroups:
            raise ControlError(f"no node group {ng!r} in EKS cluster {cluster!r} ({region})")
        return region, cluster, ng, _state(region, cluster, ng)

    @op("fail_update")
    def fail_update(args):
        """This node group's InProgress version update (running now or started
        later) fails at its next step (the next tick of fake time) with
        `errorCode` (default PodEvictionFailure) and `message`; resourceIds are
        the instances still on the old image."""
        with _LOCK:
            _, _, ng, st = group_state(args)
            st.pending_failure = {
                "errorCode": args.get("errorCode") or DEFAULT_FAIL_CODE,
                "message": args.get("message")
                or f"Reached max retries while trying to evict pods from nodes in node group {ng}",
            }
            running = st.in_progress()
            return {"updateId": running.id if running else None}

    @op("nodegroup_calls")
    def nodegroup_calls(args):
        """What was asked of this node group (UpdateNodegroupConfig,
        UpdateNodegroupVersion, DescribeUpdate), its updates, waves and rollout
        timeline, and the fake time now."""
        with _LOCK:
            st = _GROUPS.get((_region(args), args["cluster"], args["nodegroup"])) or _GroupState()
            return {
                "calls": copy.deepcopy(st.calls),
                "updates": [u.wire_json() for u in st.updates],
                "waves": copy.deepcopy(st.waves),
                "timeline": copy.deepcopy(st.timeline),
                "now": eks_rollout.CLOCK.now(),
            }
