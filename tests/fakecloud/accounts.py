"""Several AWS accounts in one moto: who made each call, and AssumeRole as IAM enforces it.

moto already acts in the account of an assumed role's credentials (the access key of an
AssumeRole answer belongs to the role's account). This module adds what nodecycle's tests
need on top, at the WSGI dispatch layer (so for every service):

* a record of every AWS call: service, operation, region and the account of the credentials
  that signed it (`aws_calls` control op; `reset: true` empties it);
* `sts:AssumeRole` refused as IAM refuses it: AccessDenied when the role does not exist in its
  account, or when its trust policy requires an `sts:ExternalId` the caller did not give
  (moto assumes any ARN, existing or not);
* `create_role`: a role in any account (its trust policy optionally requiring an external id),
  the way a spoke stack would create it.
"""

from __future__ import annotations

import io
import json
import re
import threading
from urllib.parse import parse_qs

_LOCK = threading.Lock()
_CALLS: list[dict] = []
MAX_CALLS = 200_000
_CREDENTIAL = re.compile(r"Credential=([^/]+)/[^/]+/([^/]+)/([^/]+)/")


def account_of(access_key: str) -> str:
    """The account moto acts in for `access_key` (the default account for unknown keys)."""
    from moto.iam.models import get_account_id_from

    return get_account_id_from(access_key)


def temp_secret(access_key: str) -> tuple[str, str] | None:
    """(secret, account) of a temporary (assumed-role) access key moto issued, if it is one."""
    from moto.iam.models import iam_backends

    for account_id, parts in list(iam_backends.items()):
        backend = parts["aws"]
        key = backend.access_keys.get(access_key)
        if key is not None:
            return key.secret_access_key, account_id
    return None


def _form(environ: dict) -> dict[str, list[str]]:
    length = int(environ.get("CONTENT_LENGTH") or 0)
    raw = environ["wsgi.input"].read(length) if length else b""
    environ["wsgi.input"] = io.BytesIO(raw)
    return parse_qs(raw.decode("utf-8", "replace"))


def _deny(start_response, message: str):
    body = (
        '<ErrorResponse xmlns="https://sts.amazonaws.com/doc/2011-06-15/"><Error><Type>Sender</Type>'
        f"<Code>AccessDenied</Code><Message>{message}</Message></Error>"
        "<RequestId>fakecloud-accounts</RequestId></ErrorResponse>"
    ).encode()
    start_response("403 Forbidden", [("Content-Type", "text/xml"), ("Content-Length", str(len(body)))])
    return [body]


def _assume_role_refusal(environ: dict, caller_account: str) -> tuple[str, str | None]:
    """(role ARN, why IAM refuses this AssumeRole or None)."""
    arn = (_form(environ).get("RoleArn") or [""])[0]
    return arn, _refusal(environ, arn, caller_account)


def _refusal(environ: dict, arn: str, caller_account: str) -> str | None:
    from moto.iam.models import iam_backends

    form = _form(environ)
    external_id = (form.get("ExternalId") or [None])[0]
    m = re.fullmatch(r"arn:aws[a-z-]*:iam::(\d{12}):role/(.+)", arn)
    who = f"arn:aws:sts::{caller_account}:assumed-role/caller"
    refused = f"User: {who} is not authorized to perform: sts:AssumeRole on resource: {arn}"
    if not m:
        return refused
    backend = iam_backends[m.group(1)]["aws"]
    role = next((r for r in backend.roles.values() if r.arn == arn), None)
    if role is None:
        return refused
    try:
        trust = json.loads(role.assume_role_policy_document or "{}")
    except ValueError:
        return refused
    for statement in trust.get("Statement", []):
        wanted = (statement.get("Condition") or {}).get("StringEquals", {}).get("sts:ExternalId")
        if wanted is not None and wanted != external_id:
            return refused
    return None


def wrap(original):
    """Wrap moto's DomainDispatcherApplication.__call__ with the record and the AssumeRole rule."""
    import faults

    def call(app, environ, start_response):
        m = _CREDENTIAL.search(environ.get("HTTP_AUTHORIZATION") or "")
        if m is not None:
            access_key, region, service = m.group(1), m.group(2), m.group(3)
            account = account_of(access_key)
            _, operation, _, _ = faults._aws_identity(environ)
            record = {"service": service, "operation": operation, "region": region, "account": account}
            why = None
            if service == "sts" and operation == "AssumeRole":
                record["role"], why = _assume_role_refusal(environ, account)
                record["refused"] = why is not None
            with _LOCK:
                if len(_CALLS) < MAX_CALLS:
                    _CALLS.append(record)
            if why is not None:
                return _deny(start_response, why)
        return original(app, environ, start_response)

    return call


def clear() -> None:
    """Forgets every call recorded so far."""
    with _LOCK:
        _CALLS.clear()


def register(op, ControlError) -> None:  # noqa: N803 - class passed in
    @op("aws_calls")
    def aws_calls(args):
        """Every AWS call so far: {calls: [{service, operation, region, account}]} (an
        AssumeRole also has `role` and `refused`)."""
        with _LOCK:
            calls = list(_CALLS)
            if args.get("reset"):
                _CALLS.clear()
        return {"calls": calls}

    @op("create_role")
    def create_role(args):
        """A role `name` in `account`, trusted by the default account (optionally only with
        `external_id`). Returns {arn}."""
        from moto.iam.models import iam_backends

        account = str(args["account"])
        if len(account) != 12 or not account.isdigit():
            raise ControlError(f"account must be 12 digits, got {account!r}")
        statement: dict = {
            "Effect": "Allow",
            "Principal": {"AWS": args.get("trusted", "arn:aws:iam::123456789012:root")},
            "Action": "sts:AssumeRole",
        }
        if args.get("external_id"):
            statement["Condition"] = {"StringEquals": {"sts:ExternalId": args["external_id"]}}
        role = iam_backends[account]["aws"].create_role(
            role_name=args["name"],
            assume_role_policy_document=json.dumps({"Version": "2012-10-17", "Statement": [statement]}),
            path="/",
            permissions_boundary=None,
            description="",
            tags=[],
            max_session_duration="3600",
            linked_service=None,
        )
        return {"arn": role.arn}
