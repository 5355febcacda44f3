"""A Cluster Autoscaler (CA) actor for the fake cloud, and the workload controllers it needs.

It behaves like Cluster Autoscaler on AWS (cluster-autoscaler/cloudprovider/aws, core/scaledown),
not like nodecycle, and acts only when the test asks (deterministic, between rotator passes):

* **Scale up** (``ca_scale_up {group, by?}``): ``SetDesiredCapacity`` to the group's desired
  capacity (read now) plus ``by``, or, without ``by``, plus the nodes the Pending pods need
  (``ceil(pending / podsPerNode)``); never above ``MaxSize`` (CA caps at the group's max).
* **Scale down** (``ca_scale_down {group, node?, hold?}``): a node of the group that is
  *unneeded* (Ready or not: CA also removes unready nodes): not annotated ``cluster-autoscaler.kubernetes.io/scale-down-disabled:
  "true"``, not already being deleted, the group above ``MinSize``, and every workload pod on
  it (not DaemonSet, not mirror) can move: it has a controller, is not annotated
  ``cluster-autoscaler.kubernetes.io/safe-to-evict: "false"``, its PodDisruptionBudget allows
  the disruption, and the other schedulable nodes have room for it. Without ``node``, the first
  unneeded node (empty nodes first, then by name). CA then taints it
  ``ToBeDeletedByClusterAutoscaler=<unix time>:NoSchedule``, evicts its workload pods (the
  Eviction API, so PDBs apply) and, once none is left, calls
  ``TerminateInstanceInAutoScalingGroup(ShouldDecrementDesiredCapacity=true)``. With ``hold``
  (or while pods are left) it stops after the evictions: ``ca_finish {group, node, abort?}``
  evicts again and terminates once the node is empty (``abort``: CA gives up, removes its
  taint). CA never deletes the Node object (the node lifecycle controller does, once the
  instance is gone).
* ``ca_attach {cluster, group, podsPerNode=4, scoring=LeastAllocated}``: the actor for
  ``group``'s nodes in the cluster's stand-in; ``podsPerNode`` is how many workload pods fit
  on a node (for CA's simulation and for the scheduler below); ``scoring`` the scheduler's
  NodeResourcesFit strategy: ``LeastAllocated`` (kube-scheduler's default, fewest pods first)
  or ``MostAllocated`` (bin packing, most pods first).
* ``workloads_step {cluster}``: one round of the ReplicaSet controller and the scheduler the
  stand-in lacks: each ReplicaSet registered with ``set_scale`` gets its missing pods back
  (copies of its pods, Pending), then every Pending pod is bound to a Ready, schedulable node
  without a NoSchedule/NoExecute taint and with room (it is then Running and Ready): nodes
  with fewer PreferNoSchedule taints first (kube-scheduler's TaintToleration score; the pods
  tolerate none), then by the actor's ``scoring`` (fewest or most pods). Pods that fit nowhere stay Pending: what CA scales up for.
* ``ca_log {}``: what the actor did, ``[{action, group, node?, instance?, from?, to?, reason}]``.

Every capacity change and termination is recorded by asg_fidelity.py (``scaling_records``);
those of this actor carry ``by: "cluster-autoscaler"``.
"""

from __future__ import annotations

import copy
import math
import threading
import time

import asg_fidelity

ACCOUNT_ID = "123456789012"
DEFAULT_REGION = "us-east-2"
TO_BE_DELETED = "ToBeDeletedByClusterAutoscaler"
SCALE_DOWN_DISABLED = "cluster-autoscaler.kubernetes.io/scale-down-disabled"
SAFE_TO_EVICT = "cluster-autoscaler.kubernetes.io/safe-to-evict"
CA = "cluster-autoscaler"

_LOCK = threading.RLock()
ACTORS: dict[tuple[str, str], dict] = {}  # (region, group) -> {cluster, podsPerNode}
LOG: list[dict] = []
_TEMPLATES: dict[tuple, dict] = {}  # (region, cluster, ns, replicaset) -> a pod of it
_COUNTER = [0]


def reset() -> None:
    with _LOCK:
        ACTORS.clear()
        LOG.clear()
        _TEMPLATES.clear()


def _log(entry: dict) -> dict:
    entry["t"] = time.time()
    with _LOCK:
        LOG.append(entry)
    return entry


def _asgs(region: str):
    from moto.autoscaling.models import autoscaling_backends

    return autoscaling_backends[ACCOUNT_ID][region]


def _workload(kube, pod) -> bool:
    return (
        not kube.is_daemonset_pod(pod)
        and not kube.is_mirror_pod(pod)
        and kube._get(pod, "status", "phase") not in ("Succeeded", "Failed")
    )


def _instance_of(kube, node) -> str | None:
    pid = str(kube._get(node, "spec", "providerID", default="") or "")
    return pid.rsplit("/", 1)[-1] if pid.startswith("aws://") else None


def _taints(kube, node) -> list:
    return list(kube._get(node, "spec", "taints", default=[]) or [])


def _schedulable(kube, node) -> bool:
    """The scheduler may bind a pod (that tolerates nothing) here."""
    return (
        kube.node_ready(node)
        and not kube._get(node, "spec", "unschedulable", default=False)
        and not any(t.get("effect") in ("NoSchedule", "NoExecute") for t in _taints(kube, node))
    )


def _prefer_not(kube, node) -> int:
    """The node's PreferNoSchedule taints (a pod that tolerates nothing prefers fewer)."""
    return sum(1 for t in _taints(kube, node) if t.get("effect") == "PreferNoSchedule")


def _pods_on(kube, c, node_name: str) -> list:
    return [
        (key, p)
        for key, p in sorted(c.store["pods"].items())
        if kube._get(p, "spec", "nodeName") == node_name and _workload(kube, p)
    ]


def _live(kube, pod) -> bool:
    return not kube._get(pod, "metadata", "deletionTimestamp")


def _follow(region: str, cluster: str, group: str) -> None:
    """The kubelets of the group's new instances register (and the nodes of terminated ones
    go) now, as they would on their own: the stand-in's node sync for the group, also when
    only an EKS node group update set it up (eks_updates._follow_kube)."""
    try:
        import eks_updates
    except ImportError:
        return
    eks_updates._follow_kube(region, cluster, group)


def register(op, ControlError) -> None:  # noqa: N803 - class passed in
    import kube

    asg_fidelity.register(op, ControlError)

    def region_of(args) -> str:
        return args.get("region") or DEFAULT_REGION

    def cluster(region: str, name: str):
        with kube._CLUSTERS_LOCK:
            c = kube.CLUSTERS.get((region, name))
        if c is None:
            raise ControlError(f"no Kubernetes stand-in for cluster {name!r} (create_kube first)")
        return c

    def actor(args):
        region = region_of(args)
        name = args["group"]
        with _LOCK:
            a = ACTORS.get((region, name))
        if a is None:
            raise ControlError(f"no Cluster Autoscaler attached to group {name!r} (ca_attach first)")
        group = _asgs(region).autoscaling_groups.get(name)
        if group is None:
            raise ControlError(f"no Auto Scaling group {name!r}")
        return region, group, cluster(region, a["cluster"]), a["podsPerNode"]

    def scoring_of(region: str, cluster_name: str) -> str:
        with _LOCK:
            for (r, _), a in ACTORS.items():
                if r == region and a["cluster"] == cluster_name:
                    return a.get("scoring", "LeastAllocated")
        return "LeastAllocated"

    def pods_per_node_of(region: str, cluster_name: str, args) -> int:
        if args.get("podsPerNode") is not None:
            return int(args["podsPerNode"])
        with _LOCK:
            for (r, _), a in ACTORS.items():
                if r == region and a["cluster"] == cluster_name:
                    return a["podsPerNode"]
        return 4

    @op("ca_attach")
    def ca_attach(args):
        region = region_of(args)
        cluster(region, args["cluster"])
        per = int(args.get("podsPerNode", 4))
        scoring = args.get("scoring", "LeastAllocated")
        if scoring not in ("LeastAllocated", "MostAllocated"):
            raise ControlError(f"scoring {scoring!r}: LeastAllocated or MostAllocated")
        if per < 1:
            raise ControlError("podsPerNode must be at least 1")
        with _LOCK:
            ACTORS[(region, args["group"])] = {"cluster": args["cluster"], "podsPerNode": per,
                                               "scoring": scoring}
        return {"group": args["group"], "cluster": args["cluster"], "podsPerNode": per,
                "scoring": scoring}

    @op("ca_log")
    def ca_log(args):
        with _LOCK:
            return {"log": list(LOG)}

    def pending_pods(c) -> list:
        return [
            p
            for _, p in sorted(c.store["pods"].items())
            if not kube._get(p, "spec", "nodeName")
            and kube._get(p, "status", "phase") == "Pending"
            and _live(kube, p)
            and not kube.is_daemonset_pod(p)
        ]

    @op("ca_scale_up")
    def ca_scale_up(args):
        region, group, c, per = actor(args)
        with c.lock:
            pending = len(pending_pods(c))
        by = args.get("by")
        by = int(by) if by is not None else math.ceil(pending / per)
        before = group.desired_capacity
        to = min(before + by, group.max_size)
        if by <= 0 or to <= before:
            reason = "no pending pods" if by <= 0 else f"max size {group.max_size} reached"
            return _log({"action": "noScaleUp", "group": group.name, "from": before, "to": before,
                         "pending": pending, "reason": reason})
        with asg_fidelity.acting_as(CA):
            _asgs(region).set_desired_capacity(group.name, to)
        _follow(region, c.name, group.name)
        return _log({"action": "scaleUp", "group": group.name, "from": before, "to": to,
                     "pending": pending, "reason": f"{pending} pending pods" if args.get("by") is None
                     else f"asked to add {by}"})

    def group_nodes(c, group) -> dict:
        """instance id -> node name, for the group's InService instances with a node."""
        ids = {s.instance.id for s in group.instance_states if s.lifecycle_state == "InService"}
        out = {}
        for (_, name), n in sorted(c.store["nodes"].items()):
            iid = _instance_of(kube, n)
            if iid in ids:
                out[iid] = name
        return out

    def why_needed(c, group, node_name: str, per: int) -> str | None:
        """Why CA keeps `node_name` (None: unneeded, it may remove it)."""
        node = c.store["nodes"].get(("", node_name))
        if node is None:
            return "no such node"
        annotations = kube._get(node, "metadata", "annotations", default={}) or {}
        if annotations.get(SCALE_DOWN_DISABLED) == "true":
            return "scale-down disabled by annotation"
        if any(t.get("key") == TO_BE_DELETED for t in _taints(kube, node)):
            return "already being deleted"
        if group.desired_capacity <= group.min_size:
            return f"group at MinSize {group.min_size}"
        pods = [p for _, p in _pods_on(kube, c, node_name) if _live(kube, p)]
        budgets: dict = {}
        for p in pods:
            meta = p["metadata"]
            if (meta.get("annotations") or {}).get(SAFE_TO_EVICT) == "false":
                return f"pod {meta['namespace']}/{meta['name']} is not safe to evict"
            if kube.owner_controller(p) is None:
                return f"pod {meta['namespace']}/{meta['name']} is not replicated"
            for (ns, pname), pdb in sorted(c.store["poddisruptionbudgets"].items()):
                if ns != meta["namespace"]:
                    continue
                reqs = kube.selector_from_label_selector(kube._get(pdb, "spec", "selector"))
                if reqs is not None and kube.label_match(reqs, meta.get("labels")):
                    left = budgets.setdefault((ns, pname), c.pdb_status(pdb)["disruptionsAllowed"])
                    if left < 1:
                        return f"pod {meta['namespace']}/{meta['name']}: PodDisruptionBudget {pname} allows no disruption"
                    budgets[(ns, pname)] = left - 1
        room = 0
        for (_, other), n in sorted(c.store["nodes"].items()):
            if other != node_name and _schedulable(kube, n):
                room += max(0, per - len(_pods_on(kube, c, other)))
        if len(pods) > room:
            return f"{len(pods)} pods do not fit on the other nodes (room for {room})"
        return None

    def finish(region, group, c, node_name: str, instance: str, abort: bool) -> dict:
        """Evict what is left on the node; terminate with a decrement once it is empty."""
        with c.lock:
            left = []
            for (ns, name), p in _pods_on(kube, c, node_name):
                if not _live(kube, p):
                    left.append(f"{ns}/{name}")
                    continue
                body = {"apiVersion": "policy/v1", "kind": "Eviction",
                        "metadata": {"name": name, "namespace": ns}}
                try:
                    c.evict(ns, name, body, False)
                except kube.ApiError:
                    pass
                if (ns, name) in c.store["pods"]:
                    left.append(f"{ns}/{name}")
            if left and abort:
                node = c.store["nodes"].get(("", node_name))
                if node is not None:
                    node["spec"]["taints"] = [t for t in _taints(kube, node) if t.get("key") != TO_BE_DELETED]
                    c.touch("nodes", ("", node_name), node)
                return _log({"action": "scaleDownAborted", "group": group.name, "node": node_name,
                             "instance": instance, "remaining": left, "reason": "pods could not be evicted"})
        if left:
            return _log({"action": "draining", "group": group.name, "node": node_name,
                         "instance": instance, "remaining": left, "reason": "waiting for pods to go"})
        before = group.desired_capacity
        with asg_fidelity.acting_as(CA):
            _asgs(region).terminate_instance(instance, True)
        _follow(region, c.name, group.name)
        return _log({"action": "scaleDown", "group": group.name, "node": node_name, "instance": instance,
                     "from": before, "to": group.desired_capacity, "reason": "node unneeded, drained"})

    @op("ca_scale_down")
    def ca_scale_down(args):
        region, group, c, per = actor(args)
        with c.lock:
            nodes = group_nodes(c, group)
            by_node = {n: i for i, n in nodes.items()}
            wanted = args.get("node")
            if wanted is not None:
                if wanted not in by_node:
                    return _log({"action": "noScaleDown", "group": group.name, "node": wanted,
                                 "reason": "not a node of an InService instance of the group"})
                why = why_needed(c, group, wanted, per)
                if why is not None:
                    return _log({"action": "noScaleDown", "group": group.name, "node": wanted, "reason": why})
                chosen = wanted
            else:
                unneeded = [n for n in sorted(by_node) if why_needed(c, group, n, per) is None]
                unneeded.sort(key=lambda n: (len(_pods_on(kube, c, n)) > 0, n))
                if not unneeded:
                    return _log({"action": "noScaleDown", "group": group.name, "reason": "no unneeded node"})
                chosen = unneeded[0]
            node = c.store["nodes"][("", chosen)]
            node.setdefault("spec", {})["taints"] = _taints(kube, node) + [
                {"key": TO_BE_DELETED, "value": str(int(time.time())), "effect": "NoSchedule"}
            ]
            c.touch("nodes", ("", chosen), node)
        _log({"action": "taint", "group": group.name, "node": chosen, "instance": by_node[chosen],
              "reason": "node unneeded"})
        if args.get("hold"):
            with c.lock:
                for (ns, name), p in _pods_on(kube, c, chosen):
                    if _live(kube, p):
                        body = {"apiVersion": "policy/v1", "kind": "Eviction",
                                "metadata": {"name": name, "namespace": ns}}
                        try:
                            c.evict(ns, name, body, False)
                        except kube.ApiError:
                            pass
                left = [f"{ns}/{name}" for (ns, name), _ in _pods_on(kube, c, chosen)]
            return _log({"action": "draining", "group": group.name, "node": chosen, "instance": by_node[chosen],
                         "remaining": left, "reason": "held by the test"})
        return finish(region, group, c, chosen, by_node[chosen], abort=False)

    @op("ca_finish")
    def ca_finish(args):
        region, group, c, _ = actor(args)
        node_name = args["node"]
        with c.lock:
            node = c.store["nodes"].get(("", node_name))
            if node is None or not any(t.get("key") == TO_BE_DELETED for t in _taints(kube, node)):
                raise ControlError(f"node {node_name!r} is not being deleted by Cluster Autoscaler")
            instance = _instance_of(kube, node)
        return finish(region, group, c, node_name, instance, abort=bool(args.get("abort")))

    def group_of(args):
        region = region_of(args)
        group = _asgs(region).autoscaling_groups.get(args["group"])
        if group is None:
            raise ControlError(f"no Auto Scaling group {args['group']!r}")
        return region, group

    @op("ca_add_capacity")
    def ca_add_capacity(args):
        """CA's own scale-up call, for a CA whose Kubernetes side runs elsewhere (the real
        control plane's, in Rust): SetDesiredCapacity to the desired capacity read now plus
        ``by``, capped at MaxSize as CA caps it; recorded as CA's."""
        region, group = group_of(args)
        by = int(args["by"])
        before = group.desired_capacity
        to = min(before + by, group.max_size)
        if by <= 0 or to <= before:
            return _log({"action": "noScaleUp", "group": group.name, "from": before, "to": before,
                         "reason": "nothing to add" if by <= 0 else f"max size {group.max_size} reached"})
        with asg_fidelity.acting_as(CA):
            _asgs(region).set_desired_capacity(group.name, to)
        return _log({"action": "scaleUp", "group": group.name, "from": before, "to": to,
                     "reason": args.get("reason") or f"asked to add {by}"})

    @op("ca_terminate_instance")
    def ca_terminate_instance(args):
        """CA's own TerminateInstanceInAutoScalingGroup(ShouldDecrementDesiredCapacity=true)
        of an instance of the group (its scale-down, the node drained by the caller), recorded
        as CA's; at MinSize refused as Auto Scaling refuses the decrement."""
        region, group = group_of(args)
        instance = args["instance"]
        if not any(s.instance.id == instance for s in group.instance_states):
            raise ControlError(f"instance {instance!r} is not in group {group.name!r}")
        if group.desired_capacity <= group.min_size:
            raise ControlError(
                f"Currently, desiredCapacity={group.desired_capacity} is at MinSize={group.min_size}"
            )
        before = group.desired_capacity
        with asg_fidelity.acting_as(CA):
            _asgs(region).terminate_instance(instance, True)
        return _log({"action": "scaleDown", "group": group.name, "instance": instance,
                     "from": before, "to": group.desired_capacity, "reason": "external actor"})

    @op("workloads_step")
    def workloads_step(args):
        region = region_of(args)
        c = cluster(region, args["cluster"])
        per = pods_per_node_of(region, args["cluster"], args)
        # NodeResourcesFit's scoring: LeastAllocated (the default: emptier nodes first) or
        # MostAllocated (bin packing: fuller nodes first).
        packing = scoring_of(region, args["cluster"]) == "MostAllocated"
        created, bound = [], []
        with c.lock:
            for key, p in sorted(c.store["pods"].items()):
                ref = kube.owner_controller(p)
                if ref and ref.get("kind") == "ReplicaSet":
                    _TEMPLATES[(region, c.name, key[0], ref["name"])] = copy.deepcopy(p)
            for (ns, kind, name), replicas in sorted(c.scales.items()):
                if kind != "ReplicaSet":
                    continue
                template = _TEMPLATES.get((region, c.name, ns, name))
                if template is None:
                    continue
                live = [
                    p for (pns, _), p in c.store["pods"].items()
                    if pns == ns and (kube.owner_controller(p) or {}).get("name") == name
                    and (kube.owner_controller(p) or {}).get("kind") == "ReplicaSet"
                    and _live(kube, p) and _workload(kube, p)
                ]
                for _ in range(replicas - len(live)):
                    _COUNTER[0] += 1
                    pod = copy.deepcopy(template)
                    meta = pod["metadata"]
                    for k in ("uid", "resourceVersion", "creationTimestamp", "deletionTimestamp",
                              "deletionGracePeriodSeconds"):
                        meta.pop(k, None)
                    meta["name"] = f"{name}-{_COUNTER[0]:05d}"
                    meta["generateName"] = f"{name}-"
                    pod["spec"].pop("nodeName", None)
                    pod["status"] = {"phase": "Pending", "qosClass": "BestEffort"}
                    c.stamp_new(kube.PODS, pod, ns)
                    c.store["pods"][(ns, meta["name"])] = pod
                    created.append(f"{ns}/{meta['name']}")
            for (ns, name), p in sorted(c.store["pods"].items()):
                if kube._get(p, "spec", "nodeName") or kube._get(p, "status", "phase") != "Pending":
                    continue
                if not _live(kube, p) or kube.is_daemonset_pod(p):
                    continue
                # kube-scheduler's TaintToleration score: nodes with fewer PreferNoSchedule
                # taints the pod does not tolerate (it tolerates none) first; then the fewest pods.
                fits = [
                    (_prefer_not(kube, node),
                     -len(_pods_on(kube, c, n)) if packing else len(_pods_on(kube, c, n)), n)
                    for (_, n), node in sorted(c.store["nodes"].items())
                    if _schedulable(kube, node) and len(_pods_on(kube, c, n)) < per
                ]
                if not fits:
                    continue
                _, _, target = min(fits)
                ts = kube.rfc3339()
                p["spec"]["nodeName"] = target
                p["status"] = {"phase": "Running", "conditions": kube.pod_conditions(True, ts),
                               "startTime": ts, "qosClass": "BestEffort"}
                c.touch("pods", (ns, name), p)
                bound.append(f"{ns}/{name}")
            pending = [f"{p['metadata']['namespace']}/{p['metadata']['name']}" for p in pending_pods(c)]
        return {"created": created, "bound": bound, "pending": pending}
