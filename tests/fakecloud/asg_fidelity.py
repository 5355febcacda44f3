"""Auto Scaling as AWS behaves where moto does not, and a record of every capacity change.

moto differs from Auto Scaling in ways that matter to a program sharing a group with Cluster
Autoscaler; here it is patched to behave like AWS:

* ``SetDesiredCapacity`` outside ``[MinSize, MaxSize]`` is refused with ``ValidationError:
  New SetDesiredCapacity value N is above max value M for the AutoScalingGroup.`` (``below min
  value``), as AWS answers; moto set any value.
* ``DescribeScalingActivities`` answers the group's activities, newest first (moto answered
  none): one ``Successful`` activity per launched instance and per terminated instance, and,
  while the group is out of capacity (control op ``insufficient_capacity``), one ``Failed``
  launch activity with the ``InsufficientInstanceCapacity`` message each time the group
  tries to launch; Auto Scaling retries a launch the group owes, so while out of capacity and
  short of its desired capacity the newest activity is a failed launch (a retry is recorded
  when the newest is anything else, e.g. the terminate that made the group owe it; moto
  launches, and so fails, before it records the terminate). ``MaxRecords`` (1..100) and
  ``ActivityIds`` filter as in AWS.
* ``TerminateInstanceInAutoScalingGroup`` with ``ShouldDecrementDesiredCapacity`` on a group
  whose desired capacity is at ``MinSize`` is refused with a ``ValidationError`` (the wording is
  the fake's own); moto took the group below ``MinSize``.
* ``UpdateAutoScalingGroup`` without ``LaunchTemplate``, ``LaunchConfigurationName`` or
  ``MixedInstancesPolicy`` keeps the group's ``MixedInstancesPolicy`` (moto cleared it, so a
  plain ``MaxSize`` change turned a mixed-instances group into a single-type one).

Recorded for tests (control op ``scaling_records``):

* ``capacity``: every desired capacity change, ``{group, op, from, to, by, t}`` with ``op``
  ``SetDesiredCapacity``, ``TerminateInstanceInAutoScalingGroup`` (with a decrement) or
  ``UpdateAutoScalingGroup``, ``by`` ``api`` (an AWS call) or the actor that made it
  (``cluster-autoscaler``, see autoscaler.py; ``eks``, a node group update's rollout);
* ``terminations``: every instance termination, ``{instance, group, node, pods, op,
  decrement, by, t}`` where ``pods`` are the workload pods (not DaemonSet, not mirror, not
  finished) bound to the instance's node in the Kubernetes stand-in at that moment: an
  instance terminated with pods still on it was terminated undrained.

Control ops: ``insufficient_capacity {group, enabled}`` (on: launches fail as above; off: the
group launches what it owes, as Auto Scaling's next attempt does), ``scaling_records
{group?}``.
"""

from __future__ import annotations

import datetime as _dt
import threading
import time

ACCOUNT_ID = "123456789012"
DEFAULT_REGION = "us-east-2"

_LOCK = threading.RLock()
_LOCAL = threading.local()
ACTIVITIES: dict[tuple[str, str], list] = {}  # (region, group) -> activities, oldest first
CAPACITY: list[dict] = []
TERMINATIONS: list[dict] = []
NO_CAPACITY: set[tuple[str, str]] = set()  # (region, group) out of capacity
_PATCHED = False


def reset() -> None:
    with _LOCK:
        ACTIVITIES.clear()
        CAPACITY.clear()
        TERMINATIONS.clear()
        NO_CAPACITY.clear()


def actor() -> str:
    """Who makes the calls on this thread: ``api`` unless an actor said otherwise."""
    return getattr(_LOCAL, "actor", None) or "api"


class acting_as:  # noqa: N801 - used as a context manager
    """Calls made on this thread inside ``with acting_as(name)`` are recorded as ``name``'s."""

    def __init__(self, name: str):
        self.name = name

    def __enter__(self):
        self.before = getattr(_LOCAL, "actor", None)
        _LOCAL.actor = self.name

    def __exit__(self, *exc):
        _LOCAL.actor = self.before


def _now() -> _dt.datetime:
    return _dt.datetime.now(_dt.timezone.utc)


def _op(name: str, decrement: bool | None = None):
    """The API operation under way on this thread (innermost wins for records)."""

    class _Scope:
        def __enter__(self):
            self.before = getattr(_LOCAL, "op", None)
            if self.before is None:
                _LOCAL.op = (name, decrement)

        def __exit__(self, *exc):
            _LOCAL.op = self.before

    return _Scope()


def _activity(group, description: str, cause: str, status: str, message: str | None = None):
    from moto.autoscaling.models import Activity

    a = Activity(description, cause, group, status_code=status)
    a.status_message = message
    a.progress = 100
    a.details = "{}"
    with _LOCK:
        ACTIVITIES.setdefault((group.region, group.name), []).append(a)
    return a


def _failed_launch(group, count_needed: int):
    """A launch refused for lack of capacity, recorded as Auto Scaling words it."""
    current = len(group.instance_states)
    zone = sorted(group.availability_zones)[0] if group.availability_zones else f"{group.region}a"
    message = (
        f"We currently do not have sufficient {group.instance_type} capacity in the Availability "
        f"Zone you requested ({zone}). Our system will be working on provisioning additional "
        f"capacity. You can currently get {group.instance_type} capacity by not specifying an "
        f"Availability Zone in your request or choosing {zone.rstrip('abcdef')}b. Launching EC2 "
        f"instance failed."
    )
    return _activity(
        group,
        f"Launching a new EC2 instance.  Status Reason: {message}",
        f"At {_now():%Y-%m-%dT%H:%M:%SZ} an instance was started in response to a difference "
        f"between desired and actual capacity, increasing the capacity from {current} to "
        f"{current + count_needed}.",
        "Failed",
        message,
    )


def _retry_launch(region: str, name: str) -> None:
    """Auto Scaling keeps retrying a launch the group owes: while out of capacity, the newest
    activity of a group short of its desired capacity is a failed launch (the fake records a
    retry when the newest is anything else, e.g. the terminate that made the group owe it)."""
    group = _group(region, name)
    if group is None or (region, name) not in NO_CAPACITY:
        return
    owed = group.desired_capacity - len(group.instance_states)
    if owed <= 0:
        return
    with _LOCK:
        acts = ACTIVITIES.get((region, name), [])
        newest = max(acts, key=lambda a: a.start_time) if acts else None
    if newest is not None and newest.status_code == "Failed" and newest.description.startswith("Launching"):
        return
    _failed_launch(group, owed)


def _node_pods(instance_id: str, region: str) -> tuple[str | None, list[str]]:
    """The node of `instance_id` in a Kubernetes stand-in, and its workload pods."""
    try:
        import kube
    except ImportError:
        return None, []
    with kube._CLUSTERS_LOCK:
        clusters = [c for (r, _), c in kube.CLUSTERS.items() if r == region]
    for c in clusters:
        with c.lock:
            node = None
            for (_, name), n in c.store["nodes"].items():
                if str(kube._get(n, "spec", "providerID", default="")).endswith("/" + instance_id):
                    node = name
                    break
            if node is None:
                node = c.synced_instances.get(instance_id)
            if node is None:
                continue
            pods = [
                f"{ns}/{name}"
                for (ns, name), p in sorted(c.store["pods"].items())
                if kube._get(p, "spec", "nodeName") == node
                and not kube.is_daemonset_pod(p)
                and not kube.is_mirror_pod(p)
                and kube._get(p, "status", "phase") not in ("Succeeded", "Failed")
            ]
            return node, pods
    return None, []


def apply_patches() -> None:
    global _PATCHED
    with _LOCK:
        if _PATCHED:
            return
        _PATCHED = True
    from moto.autoscaling import models as m
    from moto.autoscaling.exceptions import ValidationError
    from moto.autoscaling.responses import AutoScalingResponse
    from moto.core.responses import ActionResult
    from moto.ec2.models import EC2Backend

    backend_cls = m.AutoScalingBackend
    group_cls = m.FakeAutoScalingGroup

    def record_capacity(group, op: str, before, after) -> None:
        if before != after:
            with _LOCK:
                CAPACITY.append({"group": group.name, "op": op, "from": before, "to": after,
                                 "by": actor(), "t": time.time()})

    original_set = backend_cls.set_desired_capacity

    original_set_call = AutoScalingResponse.set_desired_capacity

    def set_desired_capacity_call(self):
        """The API call (internal callers, e.g. DeleteNodegroup's emptying, are not checked)."""
        group = self.autoscaling_backend.autoscaling_groups.get(self._get_param("AutoScalingGroupName"))
        desired_capacity = self._get_int_param("DesiredCapacity")
        if group is not None and desired_capacity is not None:
            if desired_capacity > group.max_size:
                raise ValidationError(
                    f"New SetDesiredCapacity value {desired_capacity} is above max value "
                    f"{group.max_size} for the AutoScalingGroup."
                )
            if desired_capacity < group.min_size:
                raise ValidationError(
                    f"New SetDesiredCapacity value {desired_capacity} is below min value "
                    f"{group.min_size} for the AutoScalingGroup."
                )
        return original_set_call(self)

    AutoScalingResponse.set_desired_capacity = set_desired_capacity_call

    def set_desired_capacity(self, group_name, desired_capacity):
        group = self.autoscaling_groups.get(group_name)
        before = group.desired_capacity if group is not None else None
        with _op("SetDesiredCapacity"):
            original_set(self, group_name, desired_capacity)
        if group is not None:
            record_capacity(group, "SetDesiredCapacity", before, group.desired_capacity)

    backend_cls.set_desired_capacity = set_desired_capacity

    original_terminate = backend_cls.terminate_instance

    def terminate_instance(self, instance_id, should_decrement):
        group = next(
            (g for g in self.autoscaling_groups.values()
             if any(s.instance.id == instance_id for s in g.instance_states)),
            None,
        )
        before = group.desired_capacity if group is not None else None
        with _op("TerminateInstanceInAutoScalingGroup", bool(should_decrement)):
            activity = original_terminate(self, instance_id, should_decrement)
        if group is not None:
            record_capacity(group, "TerminateInstanceInAutoScalingGroup", before, group.desired_capacity)
        return activity

    backend_cls.terminate_instance = terminate_instance

    original_terminate_call = AutoScalingResponse.terminate_instance_in_auto_scaling_group

    def terminate_instance_call(self):
        """The API call: a decrement below MinSize is refused (moto allowed it)."""
        instance_id = self._get_param("InstanceId")
        if self._get_bool_param("ShouldDecrementDesiredCapacity", False):
            group = next(
                (g for g in self.autoscaling_backend.autoscaling_groups.values()
                 if any(s.instance.id == instance_id for s in g.instance_states)),
                None,
            )
            if group is not None and group.desired_capacity <= group.min_size:
                raise ValidationError(
                    f"Currently, desiredCapacity={group.desired_capacity} is at MinSize={group.min_size}: "
                    f"decrementing it for instance {instance_id} would go below MinSize."
                )
        return original_terminate_call(self)

    AutoScalingResponse.terminate_instance_in_auto_scaling_group = terminate_instance_call

    original_update = backend_cls.update_auto_scaling_group

    def update_auto_scaling_group(self, name, *args, **kwargs):
        group = self.autoscaling_groups.get(name)
        keep = None
        if (
            group is not None
            and not kwargs.get("launch_config_name")
            and not kwargs.get("launch_template")
            and not kwargs.get("mixed_instances_policy")
        ):
            # AWS keeps what the request does not name.
            keep = group.mixed_instances_policy
        before = group.desired_capacity if group is not None else None
        with _op("UpdateAutoScalingGroup"):
            out = original_update(self, name, *args, **kwargs)
        if keep:
            group.mixed_instances_policy = keep
        if group is not None:
            record_capacity(group, "UpdateAutoScalingGroup", before, group.desired_capacity)
        return out

    backend_cls.update_auto_scaling_group = update_auto_scaling_group

    original_launch = group_cls.replace_autoscaling_group_instances

    def replace_autoscaling_group_instances(self, count_needed, propagated_tags):
        key = (self.region, self.name)
        current = len(self.instance_states)
        if key in NO_CAPACITY:
            _failed_launch(self, count_needed)
            return None
        before = {s.instance.id for s in self.instance_states}
        out = original_launch(self, count_needed, propagated_tags)
        for s in self.instance_states:
            if s.instance.id not in before:
                _activity(
                    self,
                    f"Launching a new EC2 instance: {s.instance.id}",
                    f"At {_now():%Y-%m-%dT%H:%M:%SZ} an instance was started in response to a "
                    f"difference between desired and actual capacity, increasing the capacity from "
                    f"{current} to {current + count_needed}.",
                    "Successful",
                )
        return out

    group_cls.replace_autoscaling_group_instances = replace_autoscaling_group_instances

    original_ec2_terminate = EC2Backend.terminate_instances

    def terminate_instances(self, instance_ids):
        op, decrement = getattr(_LOCAL, "op", None) or ("TerminateInstances", None)
        for iid in instance_ids:
            try:
                inst = self.get_instance(iid)
            except Exception:
                continue
            if getattr(inst, "state", None) == "terminated":
                continue
            group = getattr(inst, "autoscaling_group", None)
            node, pods = _node_pods(iid, self.region_name)
            with _LOCK:
                TERMINATIONS.append({
                    "instance": iid,
                    "group": group.name if group is not None else None,
                    "image": getattr(inst, "image_id", None),
                    "node": node,
                    "pods": pods,
                    "op": op,
                    "decrement": decrement,
                    "by": actor(),
                    "t": time.time(),
                })
            if group is not None:
                _activity(
                    group,
                    f"Terminating EC2 instance: {iid}",
                    f"At {_now():%Y-%m-%dT%H:%M:%SZ} instance {iid} was taken out of service in "
                    f"response to a user request.",
                    "Successful",
                )
        return original_ec2_terminate(self, instance_ids)

    EC2Backend.terminate_instances = terminate_instances

    def describe_scaling_activities(self):
        name = self._get_param("AutoScalingGroupName")
        ids = self._get_param("ActivityIds", []) or []
        max_records = self._get_int_param("MaxRecords") or 100
        if not 1 <= max_records <= 100:
            raise ValidationError(
                f"1 validation error detected: Value '{max_records}' at 'maxRecords' failed to satisfy "
                f"constraint: Member must have value less than or equal to 100"
            )
        region = self.region
        if name:
            _retry_launch(region, name)
        with _LOCK:
            if name:
                acts = list(ACTIVITIES.get((region, name), []))
            else:
                acts = [a for (r, _), v in ACTIVITIES.items() if r == region for a in v]
        acts.sort(key=lambda a: a.start_time, reverse=True)
        if ids:
            acts = [a for a in acts if a.activity_id in ids]
        return ActionResult({"Activities": acts[:max_records]})

    AutoScalingResponse.describe_scaling_activities = describe_scaling_activities


def _group(region: str, name: str):
    from moto.autoscaling.models import autoscaling_backends

    group = autoscaling_backends[ACCOUNT_ID][region].autoscaling_groups.get(name)
    return group


def register(op, ControlError) -> None:  # noqa: N803 - class passed in
    @op("insufficient_capacity")
    def insufficient_capacity(args):
        region = args.get("region") or DEFAULT_REGION
        name = args["group"]
        group = _group(region, name)
        if group is None:
            raise ControlError(f"no Auto Scaling group {name!r}")
        enabled = bool(args.get("enabled", True))
        with _LOCK:
            if enabled:
                NO_CAPACITY.add((region, name))
            else:
                NO_CAPACITY.discard((region, name))
        if not enabled:
            # Auto Scaling's next attempt launches what the group owes.
            group.set_desired_capacity(group.desired_capacity)
        return {"group": name, "enabled": enabled, "desired": group.desired_capacity,
                "instances": len(group.instance_states)}

    @op("scaling_records")
    def scaling_records(args):
        name = args.get("group")
        with _LOCK:
            capacity = [c for c in CAPACITY if name is None or c["group"] == name]
            terminations = [t for t in TERMINATIONS if name is None or t["group"] == name]
        return {"capacity": capacity, "terminations": terminations}
