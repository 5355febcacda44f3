"""CloudWatch over the Smithy RPC v2 CBOR protocol, in front of moto's CloudWatch backend.

The Rust SDK (aws-sdk-cloudwatch 1.x since 2025) speaks ``rpc-v2-cbor``: ``POST
/service/GraniteServiceVersion20100801/operation/<Operation>`` with a CBOR body and the header
``smithy-protocol: rpc-v2-cbor``. moto 5 serves CloudWatch only over the query protocol, so
these requests would 404. This layer decodes them, calls moto's own backend of the account whose
credentials signed the request (the same alarms the
query protocol sees), and answers as CloudWatch does: a CBOR map, timestamps as CBOR tag 1
(epoch seconds), errors as status 400 with ``__type`` and ``message``.

Operations: ``DescribeAlarms`` (AlarmNames, AlarmNamePrefix, StateValue; no paging: moto holds
few alarms), ``PutMetricAlarm`` (single-metric alarms), ``SetAlarmState``, ``DeleteAlarms``.
Any other operation is refused with ``UnknownOperationException``, as the service refuses an
operation it does not have.
"""

from __future__ import annotations

import datetime as _dt
import re

import cbor2

PREFIX = "/service/GraniteServiceVersion20100801/operation/"
ACCOUNT = "123456789012"
_CREDENTIAL = re.compile(r"Credential=([^/]+)/\d{8}/([a-z0-9-]+)/monitoring/")


class _Error(Exception):
    def __init__(self, kind: str, message: str, status: int = 400):
        super().__init__(message)
        self.kind, self.message, self.status = kind, message, status


def _ts(t: _dt.datetime) -> cbor2.CBORTag:
    if t.tzinfo is None:
        t = t.replace(tzinfo=_dt.timezone.utc)
    return cbor2.CBORTag(1, t.timestamp())


def _backend(account: str, region: str):
    from moto.cloudwatch.models import cloudwatch_backends

    return cloudwatch_backends[account][region]


def _metric_alarm(a) -> dict:
    out = {
        "AlarmName": a.name,
        "AlarmArn": a.alarm_arn,
        "StateValue": a.state_value,
        "StateReason": a.state_reason or "",
        "StateUpdatedTimestamp": _ts(a.state_updated_timestamp),
        "ActionsEnabled": bool(a.actions_enabled),
        "AlarmActions": list(a.alarm_actions or []),
        "OKActions": list(a.ok_actions or []),
        "InsufficientDataActions": list(a.insufficient_data_actions or []),
        "EvaluationPeriods": int(a.evaluation_periods),
        "ComparisonOperator": a.comparison_operator,
    }
    for key, value in (
        ("Namespace", a.namespace),
        ("MetricName", a.metric_name),
        ("Statistic", a.statistic),
        ("Period", a.period),
        ("Threshold", a.threshold),
    ):
        if value is not None:
            out[key] = value
    return out


def _describe_alarms(backend, body: dict) -> dict:
    alarms = list(backend.describe_alarms())
    names = body.get("AlarmNames")
    if names:
        if len(names) > 100:
            raise _Error("ValidationError", "AlarmNames: at most 100 names")
        alarms = [a for a in alarms if a.name in names]
    prefix = body.get("AlarmNamePrefix")
    if prefix:
        alarms = [a for a in alarms if a.name.startswith(prefix)]
    state = body.get("StateValue")
    if state:
        alarms = [a for a in alarms if a.state_value == state]
    types = body.get("AlarmTypes") or ["MetricAlarm"]
    metric = [_metric_alarm(a) for a in alarms] if "MetricAlarm" in types else []
    return {"MetricAlarms": metric, "CompositeAlarms": []}


def _put_metric_alarm(backend, body: dict) -> dict:
    for field in ("AlarmName", "EvaluationPeriods", "ComparisonOperator"):
        if field not in body:
            raise _Error("ValidationError", f"{field} is required")
    backend.put_metric_alarm(
        name=body["AlarmName"],
        namespace=body.get("Namespace"),
        metric_name=body.get("MetricName"),
        comparison_operator=body["ComparisonOperator"],
        evaluation_periods=body["EvaluationPeriods"],
        period=body.get("Period"),
        threshold=body.get("Threshold"),
        statistic=body.get("Statistic"),
        description=body.get("AlarmDescription"),
        dimensions=[
            {"name": d["Name"], "value": d["Value"]} for d in body.get("Dimensions", [])
        ],
        alarm_actions=body.get("AlarmActions", []),
        ok_actions=body.get("OKActions", []),
        insufficient_data_actions=body.get("InsufficientDataActions", []),
        unit=body.get("Unit"),
        actions_enabled=body.get("ActionsEnabled", True),
        treat_missing_data=body.get("TreatMissingData"),
    )
    return {}


def _set_alarm_state(backend, body: dict) -> dict:
    name = body.get("AlarmName")
    if name not in backend.alarms:
        raise _Error("ResourceNotFound", f"Alarm {name} not found", 404)
    state = body.get("StateValue")
    if state not in ("OK", "ALARM", "INSUFFICIENT_DATA"):
        raise _Error("ValidationError", f"StateValue {state!r} is not one of OK, ALARM, INSUFFICIENT_DATA")
    backend.set_alarm_state(name, body.get("StateReason", ""), body.get("StateReasonData"), state)
    return {}


def _delete_alarms(backend, body: dict) -> dict:
    backend.delete_alarms(body.get("AlarmNames", []))
    return {}


OPERATIONS = {
    "DescribeAlarms": _describe_alarms,
    "PutMetricAlarm": _put_metric_alarm,
    "SetAlarmState": _set_alarm_state,
    "DeleteAlarms": _delete_alarms,
}


def _respond(start_response, status: int, body: dict):
    data = cbor2.dumps(body)
    reason = {200: "OK", 400: "Bad Request", 404: "Not Found"}.get(status, "Error")
    start_response(
        f"{status} {reason}",
        [
            ("Content-Type", "application/cbor"),
            ("smithy-protocol", "rpc-v2-cbor"),
            ("Content-Length", str(len(data))),
        ],
    )
    return [data]


def handle(environ, start_response):
    """Serves one CBOR CloudWatch request (PATH_INFO under PREFIX)."""
    operation = environ.get("PATH_INFO", "")[len(PREFIX):]
    region = "us-east-2"
    account = ACCOUNT
    m = _CREDENTIAL.search(environ.get("HTTP_AUTHORIZATION", ""))
    if m:
        # The alarms of the account whose credentials signed the request (an assumed role's
        # temporary key acts in the role's account), as CloudWatch serves them.
        from accounts import account_of

        account, region = account_of(m.group(1)), m.group(2)
    try:
        length = int(environ.get("CONTENT_LENGTH") or 0)
        raw = environ["wsgi.input"].read(length) if length else b""
        body = cbor2.loads(raw) if raw else {}
        if not isinstance(body, dict):
            raise _Error("SerializationException", "the request body is not a CBOR map")
        fn = OPERATIONS.get(operation)
        if fn is None:
            raise _Error("UnknownOperationException", f"unknown operation {operation}", 404)
        return _respond(start_response, 200, fn(_backend(account, region), body))
    except _Error as e:
        return _respond(start_response, e.status, {"__type": e.kind, "message": e.message})
    except cbor2.CBORDecodeError as e:
        return _respond(start_response, 400, {"__type": "SerializationException", "message": str(e)})


def wrap(original):
    """`DomainDispatcherApplication.__call__` with CBOR CloudWatch requests served here."""

    def call(app, environ, start_response):
        if environ.get("PATH_INFO", "").startswith(PREFIX):
            return handle(environ, start_response)
        return original(app, environ, start_response)

    return call
