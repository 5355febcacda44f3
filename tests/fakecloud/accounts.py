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
  the way a spoke stack would create it;
* a **presigned** `GET /?Action=GetCallerIdentity&...&X-Amz-Signature=...` (no Authorization
  header; how aws-iam-authenticator and nodecycle's caller proofs ask STS who signed a request)
  answered as STS answers it: the SigV4 signature checked over the request as received (method,
  path, query, every signed header with the value this request carries, the empty payload),
  with the test credentials or an assumed role's, at most 15 minutes old; then the identity of
  the signing key (moto's `GetCallerIdentity`), as JSON when `Accept: application/json` (else
  XML); `403 SignatureDoesNotMatch` / `AccessDenied` otherwise. moto itself neither checks the
  signature of a presigned request nor reads its access key.
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


PRESIGN_MAX_AGE = 15 * 60
_PRESIGN_PARAMS = {
    "Action", "Version", "X-Amz-Algorithm", "X-Amz-Credential", "X-Amz-Date", "X-Amz-Expires",
    "X-Amz-SignedHeaders", "X-Amz-Signature", "X-Amz-Security-Token",
}


def _sts_answer(environ, start_response, status: str, result: dict | None, code: str = "", message: str = ""):
    json_wanted = "application/json" in (environ.get("HTTP_ACCEPT") or "")
    if result is not None:
        if json_wanted:
            body = json.dumps({"GetCallerIdentityResponse": {
                "GetCallerIdentityResult": result,
                "ResponseMetadata": {"RequestId": "fakecloud-presigned"}}}).encode()
        else:
            fields = "".join(f"<{k}>{v}</{k}>" for k, v in result.items())
            body = ('<GetCallerIdentityResponse xmlns="https://sts.amazonaws.com/doc/2011-06-15/">'
                    f"<GetCallerIdentityResult>{fields}</GetCallerIdentityResult>"
                    "<ResponseMetadata><RequestId>fakecloud-presigned</RequestId></ResponseMetadata>"
                    "</GetCallerIdentityResponse>").encode()
    elif json_wanted:
        body = json.dumps({"Error": {"Code": code, "Message": message, "Type": "Sender"},
                           "RequestId": "fakecloud-presigned"}).encode()
    else:
        body = ('<ErrorResponse xmlns="https://sts.amazonaws.com/doc/2011-06-15/"><Error><Type>Sender</Type>'
                f"<Code>{code}</Code><Message>{message}</Message></Error>"
                "<RequestId>fakecloud-presigned</RequestId></ErrorResponse>").encode()
    ctype = "application/json" if json_wanted else "text/xml"
    start_response(status, [("Content-Type", ctype), ("Content-Length", str(len(body)))])
    return [body]


def presigned_identity(environ, start_response):
    """The answer to a presigned GetCallerIdentity (see the module doc), or None when the
    request is not one (then moto answers it)."""
    import datetime as _dt
    import hashlib
    import hmac
    import time
    from urllib.parse import quote, unquote

    import kube

    if environ.get("REQUEST_METHOD") != "GET" or environ.get("HTTP_AUTHORIZATION"):
        return None
    query = environ.get("QUERY_STRING") or ""
    if "X-Amz-Signature=" not in query or "Action=GetCallerIdentity" not in query:
        return None
    params: dict[str, str] = {}
    for pair in query.split("&"):
        k, _, v = pair.partition("=")
        k, v = unquote(k), unquote(v.replace("+", "%20"))
        if k not in _PRESIGN_PARAMS or k in params:
            return _sts_answer(environ, start_response, "400 Bad Request", None, "InvalidParameterValue",
                               f"unexpected or repeated query parameter {k}")
        params[k] = v
    denied = lambda why: _sts_answer(environ, start_response, "403 Forbidden", None, "SignatureDoesNotMatch", why)  # noqa: E731
    for k in ("X-Amz-Credential", "X-Amz-Date", "X-Amz-SignedHeaders", "X-Amz-Signature"):
        if k not in params:
            return denied(f"missing {k}")
    cred = params["X-Amz-Credential"].split("/")
    if len(cred) != 5 or cred[3] != "sts" or cred[4] != "aws4_request":
        return denied("malformed X-Amz-Credential")
    access_key, date, region = cred[0], cred[1], cred[2]
    if access_key == kube.AUTH["access_key"]:
        secret = kube.AUTH["secret_key"]
    else:
        found = temp_secret(access_key)
        if found is None:
            return _sts_answer(environ, start_response, "403 Forbidden", None, "InvalidClientTokenId",
                               "The security token included in the request is invalid.")
        secret = found[0]
    try:
        signed_at = _dt.datetime.strptime(params["X-Amz-Date"], "%Y%m%dT%H%M%SZ").replace(tzinfo=_dt.timezone.utc)
    except ValueError:
        return denied("malformed X-Amz-Date")
    age = time.time() - signed_at.timestamp()
    if age > PRESIGN_MAX_AGE:
        return _sts_answer(environ, start_response, "403 Forbidden", None, "AccessDenied", "Request has expired")
    signed = params["X-Amz-SignedHeaders"].split(";")
    headers = []
    for name in signed:
        value = environ.get("HTTP_" + name.upper().replace("-", "_"))
        if value is None:
            return denied(f"signed header {name} is missing from the request")
        headers.append(f"{name}:{' '.join(value.split())}\n")
    canonical_query = "&".join(
        f"{quote(k, safe='-_.~')}={quote(v, safe='-_.~')}"
        for k, v in sorted((k, v) for k, v in params.items() if k != "X-Amz-Signature")
    )
    canonical_request = "\n".join(["GET", environ.get("PATH_INFO") or "/", canonical_query,
                                    "".join(headers), ";".join(signed), kube.EMPTY_SHA256])
    string_to_sign = "\n".join(["AWS4-HMAC-SHA256", params["X-Amz-Date"], f"{date}/{region}/sts/aws4_request",
                                hashlib.sha256(canonical_request.encode()).hexdigest()])
    key = kube.sigv4_signing_key(secret, date, region, "sts")
    expected = hmac.new(key, string_to_sign.encode(), hashlib.sha256).hexdigest()
    if not hmac.compare_digest(expected, params["X-Amz-Signature"]):
        return denied("The request signature we calculated does not match the signature you provided.")
    from moto.sts.models import sts_backends

    account = account_of(access_key)
    user_id, arn, account = sts_backends[account]["aws"].get_caller_identity(access_key, region)
    with _LOCK:
        if len(_CALLS) < MAX_CALLS:
            _CALLS.append({"service": "sts", "operation": "GetCallerIdentity", "region": region,
                           "account": account, "presigned": True})
    return _sts_answer(environ, start_response, "200 OK", {"Arn": arn, "UserId": user_id, "Account": account})


def wrap(original):
    """Wrap moto's DomainDispatcherApplication.__call__ with the record and the AssumeRole rule."""
    import faults

    def call(app, environ, start_response):
        answered = presigned_identity(environ, start_response)
        if answered is not None:
            return answered
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
