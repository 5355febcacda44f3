"""Auto Scaling lifecycle actions for moto: CompleteLifecycleAction and
RecordLifecycleActionHeartbeat answered as AWS answers them, and the control op that puts an
instance into a lifecycle hook's wait state.

moto stores lifecycle hooks (PutLifecycleHook / DescribeLifecycleHooks) but never holds an
instance in ``Terminating:Wait`` or ``Pending:Wait``, and answers the two calls with
NotImplementedError. Here:

* control op ``lifecycle_wait`` ``{group, hook, instance, token?, decrement?, account?}``: the instance
  enters the wait state of ``hook`` (which must exist on the group: PutLifecycleHook first),
  as Auto Scaling does when a termination (``autoscaling:EC2_INSTANCE_TERMINATING``) or a
  launch (``autoscaling:EC2_INSTANCE_LAUNCHING``) meets the hook. Answers the
  ``LifecycleActionToken`` (the given one, or a new UUID) that the lifecycle event carries.
* CompleteLifecycleAction / RecordLifecycleActionHeartbeat act on an *active* action only:
  same group and hook, and the given token and/or instance id. Anything else (an unknown
  token, another hook's name, an instance not waiting, an action completed or timed out) is
  ``ValidationError: No active Lifecycle Action found with token <token>`` (or ``with
  instance ID <id>`` when no token was given), which is what Auto Scaling answers.
* A heartbeat restarts the hook's HeartbeatTimeout (up to the global timeout, 100 x
  HeartbeatTimeout or 48 h); when it runs out the hook's DefaultResult applies.
* The result: a terminating instance goes on to terminate (CONTINUE or ABANDON: it leaves
  the group and EC2 terminates it); a launching instance goes InService on CONTINUE, and is
  terminated (the group launches a replacement) on ABANDON.
* Instance lifecycle policy: CreateAutoScalingGroup / UpdateAutoScalingGroup accept
  ``InstanceLifecyclePolicy.RetentionTriggers.TerminateHookAbandon`` (``retain`` or
  ``terminate``, anything else is a ``ValidationError``), DescribeAutoScalingGroups answers it
  (moto ignored it). With ``retain``, a terminate action that ends ABANDON (the call, or a
  timeout whose DefaultResult is ABANDON) leaves the instance in the group as
  ``Terminating:Retained`` (running) instead of terminating it: it does not count toward the
  desired capacity (moto counts InService instances) and a scale-in never picks it; it stays
  until TerminateInstanceInAutoScalingGroup ends it (no capacity change: any
  ``ShouldDecrementDesiredCapacity`` is ignored for it, as it was never counted).

Every call is logged (control op ``lifecycle_actions``).
"""

from __future__ import annotations

import threading
import time
import uuid

ACCOUNT_ID = "123456789012"
DEFAULT_REGION = "us-east-2"
TERMINATING = "autoscaling:EC2_INSTANCE_TERMINATING"
LAUNCHING = "autoscaling:EC2_INSTANCE_LAUNCHING"
GLOBAL_TIMEOUT_CAP = 48 * 3600
RETAINED = "Terminating:Retained"
RETENTION_VALUES = ("retain", "terminate")

_LOCK = threading.RLock()
CALLS: list = []
_ACTIONS: list["_Action"] = []


class _Action:
    def __init__(self, account, region, group, hook, instance, token, transition, timeout, default_result, started):
        self.account = account
        self.region = region
        self.group = group
        self.hook = hook
        self.instance = instance
        self.token = token
        self.transition = transition
        self.timeout = timeout
        self.default_result = default_result
        self.deadline = started + timeout
        self.global_deadline = started + min(100 * timeout, GLOBAL_TIMEOUT_CAP)
        self.result: str | None = None  # set once the action is over

    def active(self, now: float) -> bool:
        return self.result is None and now < min(self.deadline, self.global_deadline)


def reset() -> None:
    with _LOCK:
        CALLS.clear()
        _ACTIONS.clear()


def _asgs(account: str, region: str):
    from moto.autoscaling.models import autoscaling_backends

    return autoscaling_backends[account][region]


def _finish(action: _Action, result: str) -> None:
    """The action is over with `result`: the instance goes on (see the module doc)."""
    action.result = result
    asgs = _asgs(action.account, action.region)
    group = asgs.autoscaling_groups.get(action.group)
    if group is None:
        return
    state = next((s for s in group.instance_states if s.instance.id == action.instance), None)
    if state is None:
        return
    if action.transition == LAUNCHING and result == "CONTINUE":
        state.lifecycle_state = "InService"
        return
    if action.transition != LAUNCHING and result == "ABANDON" and retains(group):
        state.lifecycle_state = RETAINED
        return
    # Terminating (either result), or a launch abandoned: the instance leaves the group and is
    # terminated; a launch abandoned is replaced (desired capacity unchanged).
    asgs.detach_instances(action.group, [action.instance], False)
    asgs.ec2_backend.terminate_instances([action.instance])


def retains(group) -> bool:
    """The group's instance lifecycle policy retains an abandoned terminate action's instance."""
    policy = getattr(group, "instance_lifecycle_policy", None) or {}
    return (policy.get("RetentionTriggers") or {}).get("TerminateHookAbandon") == "retain"


def _policy_param(self):
    """The request's InstanceLifecyclePolicy as {RetentionTriggers: {TerminateHookAbandon}},
    None when absent; a ValidationError for a value Auto Scaling refuses."""
    from moto.autoscaling.exceptions import ValidationError

    params = self._get_params()
    policy = params.get("InstanceLifecyclePolicy")
    if policy is None:
        return None
    value = ((policy or {}).get("RetentionTriggers") or {}).get("TerminateHookAbandon")
    if value is not None and value not in RETENTION_VALUES:
        raise ValidationError(
            f"1 validation error detected: Value '{value}' at "
            "'instanceLifecyclePolicy.retentionTriggers.terminateHookAbandon' failed to satisfy "
            "constraint: Member must satisfy enum value set: [retain, terminate]"
        )
    triggers = {"TerminateHookAbandon": value} if value is not None else {}
    return {"RetentionTriggers": triggers}


def _expire(now: float) -> None:
    """Apply the DefaultResult of every action whose timeout ran out."""
    for a in _ACTIONS:
        if a.result is None and not a.active(now):
            _finish(a, a.default_result)


def _call(self, action: str):
    from moto.autoscaling.exceptions import ValidationError
    from moto.core.responses import EmptyResult

    group = self._get_param("AutoScalingGroupName")
    hook = self._get_param("LifecycleHookName")
    instance = self._get_param("InstanceId")
    token = self._get_param("LifecycleActionToken")
    result = self._get_param("LifecycleActionResult")
    now = time.time()
    # An action is answered in the account of the credentials that signed the call.
    account = self.current_account
    entry = {"action": action, "group": group, "hook": hook, "instance": instance, "token": token,
             "result": result, "ts": now, "region": self.region, "account": account}
    with _LOCK:
        try:
            if not group or not hook or not (instance or token):
                raise ValidationError(
                    "AutoScalingGroupName, LifecycleHookName and InstanceId or LifecycleActionToken are required"
                )
            if action == "CompleteLifecycleAction" and result not in ("CONTINUE", "ABANDON"):
                # Modelled: the LifecycleActionResult must be CONTINUE or ABANDON.
                raise ValidationError(f"Invalid lifecycle action result {result}: must be CONTINUE or ABANDON")
            _expire(now)
            found = next(
                (
                    a
                    for a in _ACTIONS
                    if a.account == account and a.region == self.region and a.group == group and a.hook == hook and a.active(now)
                    and (not token or a.token == token) and (not instance or a.instance == instance)
                ),
                None,
            )
            if found is None:
                entry["error"] = "inactive"
                what = f"token {token}" if token else f"instance ID {instance}"
                raise ValidationError(f"No active Lifecycle Action found with {what}")
            if action == "CompleteLifecycleAction":
                _finish(found, result)
            else:
                found.deadline = now + found.timeout
            return EmptyResult()
        finally:
            CALLS.append(entry)


def apply_patches() -> None:
    from moto.autoscaling.models import AutoScalingBackend, FakeAutoScalingGroup
    from moto.autoscaling.responses import AutoScalingResponse

    AutoScalingResponse.complete_lifecycle_action = lambda self: _call(self, "CompleteLifecycleAction")
    AutoScalingResponse.record_lifecycle_action_heartbeat = lambda self: _call(self, "RecordLifecycleActionHeartbeat")

    def with_policy(original):
        def call(self):
            policy = _policy_param(self)  # refused before anything changes
            out = original(self)
            if policy is not None:
                group = self.autoscaling_backend.autoscaling_groups.get(self._get_param("AutoScalingGroupName"))
                if group is not None:
                    group.instance_lifecycle_policy = policy
            return out

        return call

    AutoScalingResponse.create_auto_scaling_group = with_policy(AutoScalingResponse.create_auto_scaling_group)
    AutoScalingResponse.update_auto_scaling_group = with_policy(AutoScalingResponse.update_auto_scaling_group)

    # Capacity changes neither count nor pick a retained instance.
    original_set = FakeAutoScalingGroup.set_desired_capacity

    def set_desired_capacity(self, new_capacity):
        retained = [s for s in self.instance_states if s.lifecycle_state == RETAINED]
        if not retained:
            return original_set(self, new_capacity)
        self.instance_states = [s for s in self.instance_states if s.lifecycle_state != RETAINED]
        try:
            return original_set(self, new_capacity)
        finally:
            self.instance_states = self.instance_states + retained

    FakeAutoScalingGroup.set_desired_capacity = set_desired_capacity

    # A retained instance was never counted: ending it changes no capacity.
    original_terminate = AutoScalingBackend.terminate_instance

    def terminate_instance(self, instance_id, should_decrement):
        retained = any(
            s.instance.id == instance_id and s.lifecycle_state == RETAINED
            for g in self.autoscaling_groups.values()
            for s in g.instance_states
        )
        return original_terminate(self, instance_id, False if retained else should_decrement)

    AutoScalingBackend.terminate_instance = terminate_instance


def register(op, ControlError) -> None:  # noqa: N803 - class passed in
    @op("lifecycle_wait")
    def lifecycle_wait(args):
        """Put `instance` of Auto Scaling group `group` into the wait state of lifecycle hook
        `hook`, as Auto Scaling does when a termination (or launch) meets it. `decrement`
        (terminating hooks, default true): the termination lowered the desired capacity (a
        scale-in); false: the group launches a replacement now. Returns {token, state,
        heartbeatTimeout}."""
        region = args.get("region") or DEFAULT_REGION
        account = str(args.get("account") or ACCOUNT_ID)
        name, hook_name, iid = args["group"], args["hook"], args["instance"]
        asgs = _asgs(account, region)
        group = asgs.autoscaling_groups.get(name)
        if group is None:
            raise ControlError(f"no Auto Scaling group {name!r} in {region}")
        hook = asgs.lifecycle_hooks.get(f"{name}_{hook_name}")
        if hook is None:
            raise ControlError(f"no lifecycle hook {hook_name!r} on group {name} (PutLifecycleHook first)")
        state = next((s for s in group.instance_states if s.instance.id == iid), None)
        if state is None or state.lifecycle_state != "InService":
            raise ControlError(f"instance {iid} is not InService in group {name}")
        token = args.get("token") or str(uuid.uuid4())
        transition = hook.lifecycle_transition or TERMINATING
        with _LOCK:
            if any(a.token == token and a.result is None for a in _ACTIONS):
                raise ControlError(f"token {token} is already in use by an active lifecycle action")
            if transition == LAUNCHING:
                state.lifecycle_state = "Pending:Wait"
            else:
                state.lifecycle_state = "Terminating:Wait"
                if args.get("decrement", True):
                    group.desired_capacity = max(0, (group.desired_capacity or 0) - 1)
                else:
                    group.set_desired_capacity(group.desired_capacity)
            timeout = int(hook.heartbeat_timeout or 3600)
            _ACTIONS.append(_Action(account, region, name, hook_name, iid, token, transition, timeout,
                                    hook.default_result or "ABANDON", time.time()))
        return {"token": token, "state": state.lifecycle_state, "heartbeatTimeout": timeout}

    @op("lifecycle_actions")
    def lifecycle_actions(args):
        """CompleteLifecycleAction / RecordLifecycleActionHeartbeat calls, in order."""
        with _LOCK:
            _expire(time.time())
            return {"calls": list(CALLS)}
