"""DescribeInstanceStatus as EC2 answers it: failed status checks and scheduled events.

moto reports every running instance with both checks ``ok`` and no events, answers the whole
list at once whatever MaxResults says, and accepts MaxResults beside InstanceIds. EC2:

* a status check can be ``impaired`` (``Details``: ``reachability`` ``failed`` with its
  ``ImpairedSince``), and an instance can have ``Events`` scheduled (``Code``
  ``instance-reboot``, ``system-reboot``, ``system-maintenance``, ``instance-retirement``,
  ``instance-stop``, with ``NotBefore``, ``NotAfter``, ``Description``; a completed or
  cancelled one's description starts ``[Completed]`` / ``[Canceled]``); the control op
  ``instance_status_set`` sets them for an instance;
* without InstanceIds the answer comes in pages of MaxResults (5..1000) with an opaque
  NextToken; MaxResults with InstanceIds is InvalidParameterCombination; more than 100
  InstanceIds is InvalidParameterValue;
* only running instances unless IncludeAllInstances.

Every call is logged (``instance_status_calls``) so a test can count the calls of a pass.
"""

from __future__ import annotations

import threading

from moto.core.responses import ActionResult
from moto.ec2.exceptions import InvalidParameterCombination, InvalidParameterValue

from aws_fixtures import ACCOUNT_ID, DEFAULT_REGION
from instance_pages import _after, _token

_LOCK = threading.Lock()
# (account, region) -> instance id -> {"instance": {...}|None, "system": {...}|None, "events": [...]}
_STATUS: dict = {}
# (account, region) -> list of {"maxResults", "ids", "token"}
_CALLS: dict = {}

_TOKEN = "dis-page-"


def _summary(check: dict | None, running: bool) -> dict:
    if not running:
        return {"Status": "not-applicable"}
    if check and check.get("status") == "impaired":
        detail = {"Name": "reachability", "Status": "failed"}
        if check.get("since"):
            detail["ImpairedSince"] = check["since"]
        return {"Status": "impaired", "Details": [detail]}
    return {"Status": "ok", "Details": [{"Name": "reachability", "Status": "passed"}]}


def _entry(instance, extra: dict) -> dict:
    running = instance.state_code == 16
    events = []
    for e in extra.get("events") or []:
        ev = {"Code": e["code"], "Description": e.get("description") or e["code"]}
        for src, dst in (("not_before", "NotBefore"), ("not_after", "NotAfter")):
            if e.get(src):
                ev[dst] = e[src]
        events.append(ev)
    out = {
        "InstanceId": instance.id,
        "AvailabilityZone": instance.placement,
        "InstanceState": {"Code": instance.state_code, "Name": instance.state},
        "InstanceStatus": _summary(extra.get("instance"), running),
        "SystemStatus": _summary(extra.get("system"), running),
    }
    if events:
        out["Events"] = events
    return out


def apply_patches() -> None:
    from moto.ec2.responses.instances import InstanceResponse

    def describe_instance_status(self) -> ActionResult:
        self.error_on_dryrun()
        ids = self._get_param("InstanceIds", [])
        requested = self._get_param("MaxResults")
        max_results = int(requested) if requested is not None else None
        token = self._get_param("NextToken")
        if ids and max_results is not None:
            raise InvalidParameterCombination(
                "The parameter instancesSet cannot be used with the parameter maxResults"
            )
        if len(ids) > 100:
            raise InvalidParameterValue(
                f"The maximum number of instance IDs is 100, got {len(ids)}."
            )
        if max_results is not None and not 5 <= max_results <= 1000:
            raise InvalidParameterValue(
                f"Value ( {max_results} ) for parameter maxResults is invalid. Parameter must be between 5 and 1000."
            )
        include_all = self._get_bool_param("IncludeAllInstances", False)
        filters = [{"name": k, "values": v} for k, v in self._filters_from_querystring().items()]
        instances = list(self.ec2_backend.describe_instance_status(ids, include_all, filters))
        key = (self.current_account, self.region)
        with _LOCK:
            _CALLS.setdefault(key, []).append(
                {"maxResults": max_results, "ids": len(ids), "token": bool(token)}
            )
            extra = dict(_STATUS.get(key, {}))
        start = 0
        if token:
            after = _after(token, _TOKEN)
            found = [n for n, i in enumerate(instances) if i.id == after]
            if not found:
                raise InvalidParameterValue(f"The value ({token}) for parameter nextToken is invalid.")
            start = found[0] + 1
        page = instances[start:]
        next_token = None
        if max_results is not None and len(page) > max_results:
            page = page[:max_results]
            next_token = _token(page[-1].id, _TOKEN)
        statuses = [_entry(i, extra.get(i.id, {})) for i in page]
        return ActionResult({"InstanceStatuses": statuses, "NextToken": next_token})

    InstanceResponse.describe_instance_status = describe_instance_status


def reset() -> None:
    with _LOCK:
        _STATUS.clear()
        _CALLS.clear()


def register(op, ControlError) -> None:  # noqa: N803 - class passed in
    @op("instance_status_set")
    def instance_status_set(args):
        """Set what DescribeInstanceStatus reports of `instance`: `instance` and `system`
        check (`{"status": "impaired", "since": RFC 3339}` or null: ok), `events` (list of
        `{code, not_before, not_after, description}`)."""
        region = args.get("region") or DEFAULT_REGION
        account = str(args.get("account") or ACCOUNT_ID)
        iid = args.get("instance")
        if not iid:
            raise ControlError("instance_status_set needs instance")
        with _LOCK:
            _STATUS.setdefault((account, region), {})[iid] = {
                "instance": args.get("instance_check"),
                "system": args.get("system_check"),
                "events": args.get("events") or [],
            }
        return {"ok": True}

    @op("instance_status_calls")
    def instance_status_calls(args):
        """The DescribeInstanceStatus calls so far (`{maxResults, ids, token}` each)."""
        region = args.get("region") or DEFAULT_REGION
        account = str(args.get("account") or ACCOUNT_ID)
        with _LOCK:
            return {"calls": list(_CALLS.get((account, region), []))}
