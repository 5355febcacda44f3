"""The rolling update behind an EKS managed node group version update, driven by (fake) time.

EKS runs a version update in four phases (setup, scale up, upgrade, scale down) on its own,
whatever the caller does; ``DescribeUpdate`` only reads how far it got. The fake does the same
on a background timer (``_ticker``) that steps every InProgress version update:

1. **setup**: a new version of the EKS-owned launch template ``eks-<uuid>`` with the target
   image (or the customer template version's data); the backing Auto Scaling group uses it.
2. **scale up**: the group's desired and maximum size grow by max(maxUnavailable, 2 x the
   group's Availability Zones); moto launches the new instances from the new version at once.
   Then wait until every instance on the new image is Ready: ``readySeconds`` of fake time
   after it appeared and, when the cluster has a Kubernetes stand-in, its Node Ready there
   (not within ``readyTimeoutSeconds``: ``NodeCreationFailure``). The old nodes are then
   cordoned (``spec.unschedulable`` and label
   ``node.kubernetes.io/exclude-from-external-load-balancers``).
3. **upgrade**, one wave at a time: up to maxUnavailable old instances (oldest first); their
   pods are evicted through the stand-in's Eviction API, so PodDisruptionBudgets apply
   (DaemonSet and mirror pods stay, as with ``kubectl drain --ignore-daemonsets``); blocked
   evictions are retried each tick until ``drainTimeoutSeconds`` have passed since the wave
   began: then ``PodEvictionFailure``, unless the update was started with ``force`` (the
   remaining pods are deleted). Once no evicted pod is left on the nodes, ``waveSeconds``
   later (EKS: 60 s) the instances are terminated without lowering the desired capacity, so
   the group replaces them from the new version; the next wave starts when those
   replacements are Ready (as in 2).
4. **scale down**: the instances the surge added are terminated (new-image instances
   without pods first, newest first) with the desired capacity lowered, and the maximum size
   is put back; the node group takes the new release/version/launch template version and
   turns ACTIVE; the update is ``Successful``. When someone else (Cluster Autoscaler) raised
   the group's desired capacity above the surge's during the update, EKS skips this step
   ("exits immediately without bringing the node group back to its original
   configuration"): desired and maximum size stay (timeline event ``scaleDownSkipped``).

With ``updateConfig.updateStrategy`` ``MINIMAL`` (EKS: "terminates the old instances before
launching the new instances"), step 2 is skipped (no surge, the old nodes are not cordoned
together) and step 4 has nothing to scale down: each wave drains and terminates up to
maxUnavailable old instances, and the group relaunches them from the new version.

A failure (an armed ``fail_update``, ``NodeCreationFailure``, ``PodEvictionFailure``) marks the
update ``Failed`` with ``errors: [{errorCode, errorMessage, resourceIds}]`` (the instances
that did not become Ready for NodeCreationFailure, else those still on the old image), points the group back at its previous launch template version, removes
the surge and uncordons the old nodes, and the node group goes back to ACTIVE at its old
release.

Fake time runs with the wall clock unless paused (``set_eks_timing {"paused": true}``);
``advance_eks_time {"seconds": N}`` moves it on (in ticks, stepping the updates each tick).
"""

from __future__ import annotations

import copy
import math
import sys
import threading
import time
import traceback

import asg_fidelity
import eks_updates as eu
from aws_fixtures import ACCOUNT_ID

DEFAULT_TIMING = {
    "waveSeconds": 0.2,
    "readySeconds": 0.1,
    "readyTimeoutSeconds": 30.0,
    "drainTimeoutSeconds": 10.0,
    "tickSeconds": 0.05,
}
TIMING = dict(DEFAULT_TIMING)

NODE_CREATION_FAILURE = "Instances failed to join the kubernetes cluster"


class _Clock:
    """Fake seconds since the launcher started: they follow the wall clock unless paused."""

    def __init__(self):
        self.fake = 0.0
        self.last = time.monotonic()
        self.paused = False

    def now(self) -> float:
        real = time.monotonic()
        if not self.paused:
            self.fake += real - self.last
        self.last = real
        return self.fake

    def pause(self, paused: bool) -> None:
        self.now()
        self.paused = paused

    def restart(self) -> None:
        """Back to 0 fake seconds, following the wall clock (a forked launcher starts here)."""
        self.__init__()


CLOCK = _Clock()
_TICKER: threading.Thread | None = None
_REPORTED: set = set()


class Rollout:
    """How far one version update got (kept on the eks_updates._Update)."""

    def __init__(self, now: float):
        self.phase = "setup"
        self.since = now
        self.surge = 0
        self.original: tuple[int, int] | None = None  # (desired, max) before the surge
        self.first_seen: dict[str, float] = {}  # instance id -> fake time it was first seen
        self.cordoned: set[str] = set()  # node names this update cordoned
        self.wave: dict | None = None


def reset() -> None:
    TIMING.clear()
    TIMING.update(DEFAULT_TIMING)
    CLOCK.pause(False)
    REAL_KUBE.clear()


def limit(ng) -> int:
    """Instances replaced at once: updateConfig.maxUnavailable, or
    ceil(maxUnavailablePercentage x desired size); at least 1, at most 100 (EKS's cap)."""
    uc = ng.update_config or {}
    desired = int((ng.scaling_config or {}).get("desiredSize") or 0)
    if uc.get("maxUnavailablePercentage"):
        n = math.ceil(float(uc["maxUnavailablePercentage"]) * desired / 100.0)
    else:
        n = int(uc.get("maxUnavailable") or 1)
    return max(1, min(n, 100))


# --------------------------------------------------------------------------
# the backing Auto Scaling group
# --------------------------------------------------------------------------


def _point_group(region: str, st, group, upd) -> None:
    """Switch the backing ASG to the target image, as EKS does: a new version of its own
    launch template eks-<uuid> (for a customer launch template: a copy of that template
    version's data), which the ASG then uses."""
    if group is None or not st.eks_lt_id:
        return
    eks_lt = eu._ec2(ACCOUNT_ID, region).launch_templates.get(st.eks_lt_id)
    if eks_lt is None:
        return
    current = eks_lt.get_version(group.launch_template_version)
    if upd.lt_data is not None:
        data = copy.copy(upd.lt_data)
        data.setdefault("InstanceType", current.data.get("InstanceType"))
    else:
        data = copy.copy(current.data)
    if upd.target_image:
        data["ImageId"] = upd.target_image
    version = eks_lt.create_version(data, f"update {upd.id}")
    upd.previous_eks_lt_version = str(group.launch_template_version)
    eks_lt.default_version_number = version.number
    group.launch_template_version = str(version.number)
    group.provided_launch_template_version = str(version.number)
    upd.pointed = True


def _unpoint_group(region: str, st, group, upd) -> None:
    """After a failed update: the ASG goes back to the launch template version it used
    before (the node group still reports the old release)."""
    if group is None or not upd.pointed or not upd.previous_eks_lt_version:
        return
    eks_lt = eu._ec2(ACCOUNT_ID, region).launch_templates.get(st.eks_lt_id)
    if eks_lt is not None:
        eks_lt.default_version_number = int(upd.previous_eks_lt_version)
    group.launch_template_version = upd.previous_eks_lt_version
    group.provided_launch_template_version = upd.previous_eks_lt_version


def _old(group, upd) -> list:
    return [s for s in eu._in_service(group) if s.instance.image_id != upd.target_image]


def _new(group, upd) -> list:
    return [s for s in eu._in_service(group) if s.instance.image_id == upd.target_image]


# --------------------------------------------------------------------------
# the Kubernetes side: readiness, cordon, drain
# --------------------------------------------------------------------------


class RealKube:
    """A real Kubernetes API server the rollout's Kubernetes side (readiness, cordon, drain)
    talks to, as EKS talks to the cluster's API server: HTTPS with a bearer token, verified
    against the API server's CA. Registered by ``eks_kube_api``; the nodes follow the Auto
    Scaling group by the caller's doing (the real control plane's ``sync_group``), not here."""

    EXCLUDE_LB = "node.kubernetes.io/exclude-from-external-load-balancers"

    def __init__(self, endpoint: str, token: str, ca_file: str):
        import ssl

        self.endpoint = endpoint.rstrip("/")
        self.token = token
        self.context = ssl.create_default_context(cafile=ca_file)

    def request(self, method: str, path: str, body=None, content_type="application/json"):
        """(status, JSON body) of one request; network errors raise."""
        import json
        import urllib.error
        import urllib.request

        data = None if body is None else json.dumps(body).encode()
        req = urllib.request.Request(self.endpoint + path, data=data, method=method)
        req.add_header("Authorization", f"Bearer {self.token}")
        req.add_header("Accept", "application/json")
        if data is not None:
            req.add_header("Content-Type", content_type)
        try:
            with urllib.request.urlopen(req, context=self.context, timeout=10) as resp:
                raw = resp.read()
                status = resp.status
        except urllib.error.HTTPError as e:
            raw, status = e.read(), e.code
        try:
            return status, json.loads(raw or b"{}")
        except ValueError:
            return status, {"raw": raw.decode(errors="replace")}

    def node_of(self, iid: str):
        status, listed = self.request("GET", "/api/v1/nodes")
        if status != 200:
            return None
        for node in listed.get("items") or []:
            if ((node.get("spec") or {}).get("providerID") or "").rsplit("/", 1)[-1] == iid:
                return node
        return None

    def ready(self, iid: str) -> bool:
        node = self.node_of(iid)
        return node is not None and any(
            c.get("type") == "Ready" and c.get("status") == "True"
            for c in (node.get("status") or {}).get("conditions") or []
        )

    def cordon(self, r, iids: list, on: bool) -> list:
        touched = []
        for iid in iids:
            node = self.node_of(iid)
            if node is None:
                continue
            name = node["metadata"]["name"]
            if on and not (node.get("spec") or {}).get("unschedulable"):
                patch = {"spec": {"unschedulable": True}, "metadata": {"labels": {self.EXCLUDE_LB: "true"}}}
                r.cordoned.add(name)
            elif not on and name in r.cordoned:
                patch = {"spec": {"unschedulable": None}, "metadata": {"labels": {self.EXCLUDE_LB: None}}}
                r.cordoned.discard(name)
            else:
                continue
            status, _ = self.request("PATCH", f"/api/v1/nodes/{name}", patch, "application/merge-patch+json")
            if status == 200:
                touched.append(name)
        return touched

    def pods_on(self, iid: str) -> list:
        """The pods a drain moves (not DaemonSet or mirror pods) bound to the node of `iid`."""
        node = self.node_of(iid)
        if node is None:
            return []
        status, listed = self.request("GET", f"/api/v1/pods?fieldSelector=spec.nodeName%3D{node['metadata']['name']}")
        if status != 200:
            return []
        out = []
        for pod in listed.get("items") or []:
            meta = pod.get("metadata") or {}
            if "kubernetes.io/config.mirror" in (meta.get("annotations") or {}):
                continue
            if any(o.get("kind") == "DaemonSet" and o.get("controller") for o in meta.get("ownerReferences") or []):
                continue
            out.append(pod)
        return out

    def drain(self, iids: list, force: bool) -> tuple[int, int]:
        left = refused = 0
        for iid in iids:
            for pod in self.pods_on(iid):
                left += 1
                meta = pod["metadata"]
                if meta.get("deletionTimestamp"):
                    continue  # going: wait for it
                ns, name = meta["namespace"], meta["name"]
                path = f"/api/v1/namespaces/{ns}/pods/{name}"
                if force:
                    self.request("DELETE", path)
                    continue
                body = {"apiVersion": "policy/v1", "kind": "Eviction", "metadata": {"name": name, "namespace": ns}}
                status, _ = self.request("POST", path + "/eviction", body)
                if status >= 300 and status != 404:
                    refused += 1
        return left, refused

    def has_pods(self, iid: str) -> bool:
        return bool(self.pods_on(iid))


REAL_KUBE: dict[tuple[str, str], RealKube] = {}  # (region, cluster) -> API server


def _kube(region: str, cluster: str):
    """The cluster's Kubernetes stand-in, else the real API server registered for it
    (``eks_kube_api``), or None."""
    try:
        import kube
    except ImportError:
        return REAL_KUBE.get((region, cluster))
    with kube._CLUSTERS_LOCK:
        c = kube.CLUSTERS.get((region, cluster))
    if c is None or c.stopped:
        return REAL_KUBE.get((region, cluster))
    return c


def _node_of(c, iid: str):
    """(key, Node) of an instance in stand-in `c`, or (None, None)."""
    name = c.synced_instances.get(iid)
    if name and ("", name) in c.store["nodes"]:
        return ("", name), c.store["nodes"][("", name)]
    for key, node in c.store["nodes"].items():
        if ((node.get("spec") or {}).get("providerID") or "").rsplit("/", 1)[-1] == iid:
            return key, node
    return None, None


def _ready(c, r: Rollout, iid: str, now: float) -> bool:
    seen = r.first_seen.setdefault(iid, now)
    if now - seen < TIMING["readySeconds"]:
        return False
    if c is None:
        return True
    if isinstance(c, RealKube):
        return c.ready(iid)
    import kube

    with c.lock:
        _, node = _node_of(c, iid)
        return node is not None and kube.node_ready(node)


def _cordon(c, r: Rollout, iids: list, on: bool) -> list:
    """Cordon (on) or uncordon the nodes of `iids`; the node names touched."""
    if c is None:
        return []
    if isinstance(c, RealKube):
        return c.cordon(r, iids, on)
    label = "node.kubernetes.io/exclude-from-external-load-balancers"
    touched = []
    with c.lock:
        for iid in iids:
            key, node = _node_of(c, iid)
            if node is None:
                continue
            spec = node.setdefault("spec", {})
            labels = node["metadata"].setdefault("labels", {})
            if on and not spec.get("unschedulable"):
                spec["unschedulable"] = True
                labels[label] = "true"
                r.cordoned.add(key[1])
            elif not on and key[1] in r.cordoned:
                spec.pop("unschedulable", None)
                labels.pop(label, None)
                r.cordoned.discard(key[1])
            else:
                continue
            c.touch("nodes", key, node)
            touched.append(key[1])
    return touched


def _drain(c, iids: list, force: bool) -> tuple[int, int]:
    """Evict (force: delete) the pods of the nodes of `iids` that a drain moves (not
    DaemonSet or mirror pods). Returns (pods left on the nodes, evictions refused)."""
    if c is None:
        return 0, 0
    if isinstance(c, RealKube):
        return c.drain(iids, force)
    import kube

    left = refused = 0
    with c.lock:
        nodes = {key[1] for key, node in (_node_of(c, iid) for iid in iids) if node is not None}
        for key, pod in list(c.store["pods"].items()):
            if kube._get(pod, "spec", "nodeName") not in nodes:
                continue
            if kube.is_daemonset_pod(pod) or kube.is_mirror_pod(pod):
                continue
            left += 1
            if kube._get(pod, "metadata", "deletionTimestamp"):
                continue  # going: wait for it
            ns, name = key
            try:
                if force:
                    c.delete_pod(key, None, None, False)
                    continue
                body = {"apiVersion": "policy/v1", "kind": "Eviction", "metadata": {"name": name, "namespace": ns}}
                status, _ = c.evict(ns, name, body, False)
                if status >= 300:
                    refused += 1
            except kube.ApiError as e:
                if e.code != 404:
                    refused += 1
    return left, refused


def _has_pods(c, iid: str) -> bool:
    if c is None:
        return False
    if isinstance(c, RealKube):
        return c.has_pods(iid)
    import kube

    with c.lock:
        key, node = _node_of(c, iid)
        if node is None:
            return False
        return any(
            kube._get(p, "spec", "nodeName") == key[1] and not kube.is_daemonset_pod(p) and not kube.is_mirror_pod(p)
            for p in c.store["pods"].values()
        )


# --------------------------------------------------------------------------
# the phases
# --------------------------------------------------------------------------


def _event(st, upd, now: float, event: str, **detail) -> None:
    st.timeline.append({"updateId": upd.id, "t": round(now, 3), "event": event, **detail})


def scaled_up_by_others(group, r: Rollout) -> bool:
    """Someone else (Cluster Autoscaler) raised the desired capacity above what the update's
    surge set."""
    return group is not None and r.original is not None and group.desired_capacity > r.original[0] + r.surge


def _shrink(region: str, group, r: Rollout, upd, c) -> list:
    """Terminate what the surge added (new-image instances without pods first, newest first)
    with the desired capacity lowered; put the maximum size back. The instances terminated."""
    if group is None or r.original is None:
        return []
    desired, maximum = r.original
    surplus = min(r.surge, max(0, group.desired_capacity - desired))
    candidates = list(reversed(_new(group, upd))) + _old(group, upd)
    candidates.sort(key=lambda s: _has_pods(c, s.instance.id))
    victims = [s.instance.id for s in candidates[:surplus]]
    asgs = eu._asgs(ACCOUNT_ID, region)
    for iid in victims:
        asgs.terminate_instance(iid, should_decrement=True)
    group.max_size = max(maximum, group.desired_capacity)
    r.original = None
    return victims


def _fail(region: str, cluster: str, ng, st, upd, r: Rollout, code: str, message: str, now: float,
          resource_ids: list | None = None) -> None:
    group = eu._group_of(ACCOUNT_ID, region, st)
    c = _kube(region, cluster)
    old = [s.instance.id for s in _old(group, upd)] if group is not None else []
    resource_ids = old if resource_ids is None else resource_ids
    _unpoint_group(region, st, group, upd)
    removed = _shrink(region, group, r, upd, c)
    uncordoned = _cordon(c, r, old, False)
    upd.status = "Failed"
    upd.errors = [{"errorCode": code, "errorMessage": message, "resourceIds": resource_ids}]
    ng.status = "ACTIVE"
    ng.modified_at = eu._now()
    r.phase = "done"
    _event(st, upd, now, "Failed", errorCode=code, terminated=removed, uncordoned=uncordoned)
    eu._follow_kube(region, cluster, st.asg)


def _succeed(st, ng, upd, r: Rollout, now: float) -> None:
    upd.status = "Successful"
    ng.release_version = upd.target_release
    ng.version = upd.target_version
    if ng.launch_template and upd.target_lt_version:
        ng.launch_template["version"] = upd.target_lt_version
    ng.status = "ACTIVE"
    ng.modified_at = eu._now()
    r.phase = "done"
    _event(st, upd, now, "Successful")


def step(region: str, cluster: str, ng, st, upd, now: float) -> None:
    """Move one InProgress version update on as far as it can go at fake time `now`."""
    r = upd.rollout
    if r is None:
        r = upd.rollout = Rollout(now)
    if st.pending_failure is not None:
        failure, st.pending_failure = st.pending_failure, None
        _fail(region, cluster, ng, st, upd, r, failure["errorCode"], failure["message"], now)
        return
    for _ in range(16):  # several phases can pass in one step
        if r.phase == "done" or not _PHASES[r.phase](region, cluster, ng, st, upd, r, now):
            return


def _setup(region, cluster, ng, st, upd, r, now) -> bool:
    group = eu._group_of(ACCOUNT_ID, region, st)
    _point_group(region, st, group, upd)
    _event(st, upd, now, "setup", launchTemplateVersion=getattr(group, "launch_template_version", None))
    r.phase, r.since = "scaleUp", now
    return True


def minimal(ng) -> bool:
    """updateConfig.updateStrategy MINIMAL: old instances are terminated before new ones
    launch (no scale up, no scale down)."""
    return str((ng.update_config or {}).get("updateStrategy") or "DEFAULT").upper() == "MINIMAL"


def _scale_up(region, cluster, ng, st, upd, r, now) -> bool:
    group = eu._group_of(ACCOUNT_ID, region, st)
    if group is None or not _old(group, upd):
        r.phase = "scaleDown"
        return True
    if minimal(ng):
        _event(st, upd, now, "scaleUpSkipped", reason="updateStrategy MINIMAL")
        r.phase, r.since = "upgrade", now
        return True
    azs = len(set(group.availability_zones or [])) or 1
    r.surge = max(limit(ng), 2 * azs)
    r.original = (group.desired_capacity, group.max_size)
    before = {s.instance.id for s in group.instance_states}
    group.max_size = group.max_size + r.surge
    eu._asgs(ACCOUNT_ID, region).set_desired_capacity(group.name, group.desired_capacity + r.surge)
    launched = [s.instance.id for s in group.instance_states if s.instance.id not in before]
    _event(st, upd, now, "scaleUp", surge=r.surge, desired=group.desired_capacity, max=group.max_size,
           launched=launched)
    eu._follow_kube(region, cluster, st.asg)
    r.phase, r.since = "waitReady", now
    return True


def _wait_ready(region, cluster, ng, st, upd, r, now) -> bool:
    group = eu._group_of(ACCOUNT_ID, region, st)
    c = _kube(region, cluster)
    not_ready = [s.instance.id for s in _new(group, upd) if not _ready(c, r, s.instance.id, now)]
    if not_ready:
        if now - r.since > TIMING["readyTimeoutSeconds"]:
            _fail(region, cluster, ng, st, upd, r, "NodeCreationFailure", NODE_CREATION_FAILURE, now, not_ready)
        return False
    # MINIMAL has no new capacity to move to yet: each wave cordons its own nodes only.
    old = [] if minimal(ng) else [s.instance.id for s in _old(group, upd)]
    cordoned = _cordon(c, r, old, True)
    _event(st, upd, now, "nodesReady", instances=[s.instance.id for s in _new(group, upd)], cordoned=cordoned)
    r.phase, r.since = "upgrade", now
    return True


def _upgrade(region, cluster, ng, st, upd, r, now) -> bool:
    group = eu._group_of(ACCOUNT_ID, region, st)
    c = _kube(region, cluster)
    if r.wave is None:
        old = _old(group, upd)
        if not old:
            r.phase = "scaleDown"
            return True
        n = limit(ng)
        batch = [s.instance.id for s in old[:n]]
        _cordon(c, r, batch, True)
        r.wave = {"instances": batch, "limit": n, "started": now, "drained": None}
        _event(st, upd, now, "drain", instances=batch)
        return True
    wave = r.wave
    if wave["drained"] is None:
        left, refused = _drain(c, wave["instances"], force=False)
        if left:
            if now - wave["started"] <= TIMING["drainTimeoutSeconds"]:
                return False
            if not upd.force:
                _fail(region, cluster, ng, st, upd, r, eu.DEFAULT_FAIL_CODE,
                      f"Reached max retries while trying to evict pods from nodes in node group {ng.nodegroup_name}",
                      now)
                return False
            _drain(c, wave["instances"], force=True)
            _event(st, upd, now, "forceDeleted", instances=wave["instances"], pods=left)
        wave["drained"] = now
        _event(st, upd, now, "drained", instances=wave["instances"])
    if now - wave["drained"] < TIMING["waveSeconds"]:
        return False
    before = {s.instance.id for s in group.instance_states}
    asgs = eu._asgs(ACCOUNT_ID, region)
    terminated = []
    for iid in wave["instances"]:
        if iid in before:
            asgs.terminate_instance(iid, should_decrement=False)
            terminated.append(iid)
    launched = [s.instance.id for s in group.instance_states if s.instance.id not in before]
    st.waves.append({"updateId": upd.id, "terminated": terminated, "launched": launched, "limit": wave["limit"],
                     "image": upd.target_image, "t": round(now, 3)})
    _event(st, upd, now, "terminate", instances=terminated, launched=launched)
    eu._follow_kube(region, cluster, st.asg)
    r.wave = None
    r.phase, r.since = "waitReady", now
    return True


def _scale_down(region, cluster, ng, st, upd, r, now) -> bool:
    group = eu._group_of(ACCOUNT_ID, region, st)
    if scaled_up_by_others(group, r):
        # EKS: "If the Upgrade workflow determines that Cluster Autoscaler is scaling up the
        # node group during the scale down phase of the workflow, it exits immediately
        # without bringing the node group back to its original configuration."
        _event(st, upd, now, "scaleDownSkipped", desired=group.desired_capacity, max=group.max_size,
               reason="the desired capacity was raised during the update (Cluster Autoscaler)")
        r.original = None
    if r.original is not None:
        removed = _shrink(region, group, r, upd, _kube(region, cluster))
        _event(st, upd, now, "scaleDown", terminated=removed, desired=group.desired_capacity, max=group.max_size)
        eu._follow_kube(region, cluster, st.asg)
    _succeed(st, ng, upd, r, now)
    return False


_PHASES = {
    "setup": _setup,
    "scaleUp": _scale_up,
    "waitReady": _wait_ready,
    "upgrade": _upgrade,
    "scaleDown": _scale_down,
}


# --------------------------------------------------------------------------
# the timer
# --------------------------------------------------------------------------


def step_all() -> None:
    """One step of every InProgress version update, at the fake time now."""
    now = CLOCK.now()
    with eu._LOCK:
        for (region, cluster, name), st in list(eu._GROUPS.items()):
            upd = st.in_progress()
            if upd is None:
                continue
            c = eu._eks(ACCOUNT_ID, region).clusters.get(cluster)
            ng = c.nodegroups.get(name) if c is not None else None
            if ng is None:
                continue
            try:
                with asg_fidelity.acting_as("eks"):  # its capacity changes are EKS's, not a caller's
                    step(region, cluster, ng, st, upd, now)
            except Exception as e:  # a bug in the fake: say so once, keep the timer alive
                msg = traceback.format_exc()
                if msg not in _REPORTED:
                    _REPORTED.add(msg)
                    print(f"fakecloud eks {cluster}/{name}: rollout step failed: {e}\n{msg}", file=sys.stderr)


def _ticker() -> None:
    while True:
        time.sleep(TIMING["tickSeconds"])
        if not CLOCK.paused:
            step_all()


# While set (in the launcher's zygote, which must not run threads when it forks), the
# ticker waits for `release_ticker`.
_HELD = False


def hold_ticker() -> None:
    global _HELD
    _HELD = True


def release_ticker() -> None:
    """Starts the ticker held by `hold_ticker` (in a forked launcher), its clock at 0."""
    global _HELD
    _HELD = False
    CLOCK.restart()
    ensure_ticker()


def ensure_ticker() -> None:
    global _TICKER
    if _TICKER is None and not _HELD:
        _TICKER = threading.Thread(target=_ticker, name="eks-rollout", daemon=True)
        _TICKER.start()


def advance(seconds: float) -> float:
    """Move fake time on by `seconds`, stepping every update each tick of the way."""
    remaining = float(seconds)
    tick = TIMING["tickSeconds"]
    while remaining > 0:
        chunk = min(tick, remaining)
        with eu._LOCK:
            CLOCK.fake += chunk
        step_all()
        remaining -= chunk
    return CLOCK.now()


# --------------------------------------------------------------------------
# control ops
# --------------------------------------------------------------------------


def register(op, ControlError) -> None:  # noqa: N803 - class passed in
    @op("set_eks_timing")
    def set_eks_timing(args):
        """Durations of the fake rollout, in fake seconds (waveSeconds, readySeconds,
        readyTimeoutSeconds, drainTimeoutSeconds, tickSeconds), and `paused` (fake time stops:
        no update moves until resumed or advanced). Answers the settings in force and `now`."""
        for key, value in args.items():
            if key == "region":
                continue
            if key == "paused":
                CLOCK.pause(bool(value))
                continue
            if key not in DEFAULT_TIMING:
                raise ControlError(f"unknown EKS timing {key!r}; known: paused, {', '.join(DEFAULT_TIMING)}")
            if not isinstance(value, (int, float)) or value < 0 or (key == "tickSeconds" and value <= 0):
                raise ControlError(f"{key} must be a number of seconds >= 0, got {value!r}")
            TIMING[key] = float(value)
        return {**TIMING, "paused": CLOCK.paused, "now": CLOCK.now()}

    @op("eks_kube_api")
    def eks_kube_api(args):
        """The rollouts of `cluster`'s node groups read readiness, cordon and drain through the
        real Kubernetes API server at `endpoint` (bearer `token`, CA `caFile`), for a cluster
        without a stand-in; `endpoint` null forgets it. Answers {cluster, endpoint}."""
        key = (args.get("region") or "us-east-2", args["cluster"])
        if args.get("endpoint") is None:
            REAL_KUBE.pop(key, None)
        else:
            REAL_KUBE[key] = RealKube(args["endpoint"], args["token"], args["caFile"])
        return {"cluster": args["cluster"], "endpoint": args.get("endpoint"), "region": key[0]}

    @op("advance_eks_time")
    def advance_eks_time(args):
        """Move fake time on by `seconds` (also while paused), stepping the updates on the
        way. Answers {now}."""
        seconds = args["seconds"]
        if not isinstance(seconds, (int, float)) or seconds < 0:
            raise ControlError(f"seconds must be a number >= 0, got {seconds!r}")
        return {"now": advance(seconds)}
