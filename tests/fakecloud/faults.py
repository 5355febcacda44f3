"""Fault injection for the fake cloud: fail or delay a chosen fraction of the AWS calls
(moto) and of the Kubernetes API calls (the stand-ins), the way the real services fail.

Control ops (see README.md, *Faults*):

* ``faults`` ``{"aws"?: SPEC | null, "kube"?: SPEC | null, "seed"?: int}``: a section that is
  given replaces that section's settings (``null`` turns it off), a section left out stays
  as it is; counters start again from zero for a replaced section.
* ``fault_stats``: what was seen and failed, in total, per kind and per operation.

A SPEC is ``{"rate": 0..1, "kinds": [...], "delayMs"?: int, "limit"?: int, ...filters}``.
Every call in scope (after the filters) is first delayed by ``delayMs``, then failed with
probability ``rate`` by one of ``kinds`` (uniformly), until ``limit`` faults were injected.
The decision for the n-th call of one operation is a function of (seed, section, service,
operation, n) alone, so a run is reproducible whatever the interleaving of other operations.

AWS kinds, answered in the wire shape of the service's protocol so that the real SDKs
classify them as they would in AWS:

* ``throttle``: awsQuery (Auto Scaling, STS, ...) HTTP 400 ``<ErrorResponse><Error>
  <Code>Throttling</Code>``; EC2 HTTP 503 ``<Response><Errors><Error><Code>
  RequestLimitExceeded``; awsJson ``{"__type": "...#ThrottlingException"}`` (DynamoDB:
  ``ProvisionedThroughputExceededException`` for item and query operations); rest-json
  (EKS) HTTP 429 ``x-amzn-ErrorType: ThrottlingException``;
* ``500`` / ``503``: the service's internal-failure / unavailable error (awsQuery
  ``InternalFailure`` / ``ServiceUnavailable``, EC2 ``InternalError`` / ``Unavailable``,
  awsJson ``InternalServerError`` / ``ServiceUnavailable``, EKS ``ServerException`` /
  ``ServiceUnavailableException``);
* ``access_denied``: the service's answer to a caller whose IAM policy does not allow the
  call (never a default kind; it models a role without the grant): awsQuery HTTP 403
  ``AccessDenied``, EC2 HTTP 403 ``UnauthorizedOperation``, awsJson HTTP 400 and rest-json
  HTTP 403 ``AccessDeniedException``, each "User: ... is not authorized to perform:
  <service>:<operation> ...";
* ``reset``: the connection is dropped without an answer, before the call is carried out;
* ``reset_after``: the call *is* carried out, then the connection is dropped without the
  answer (a retried non-idempotent call then meets its own effect, as in AWS).

Kubernetes kinds: ``429`` (``TooManyRequests`` Status with ``Retry-After``, as API
Priority and Fairness answers), ``500`` (``InternalError``), ``503``
(``ServiceUnavailable``), ``reset``, ``reset_after``.

Control requests are never faulted (they go to the control server, not here).
"""

from __future__ import annotations

import hashlib
import io
import json
import re
import socket
import struct
import threading
import time
import uuid
from urllib.parse import parse_qs, unquote

_LOCK = threading.Lock()

AWS_KINDS = ("throttle", "500", "503", "access_denied", "reset", "reset_after")
KUBE_KINDS = ("429", "500", "503", "reset", "reset_after")
DEFAULT_AWS_KINDS = ["throttle", "500", "503", "reset"]
DEFAULT_KUBE_KINDS = ["429", "500", "503", "reset"]


class _Section:
    """The settings and counters of one section (aws or kube)."""

    def __init__(self, name: str, spec: dict, seed: int, allowed: tuple, defaults: list, filters: tuple, error):
        self.name = name
        self.seed = seed
        rate = spec.get("rate", 0.0)
        if not isinstance(rate, (int, float)) or not 0.0 <= float(rate) <= 1.0:
            raise error(f"{name}.rate must be a number from 0 to 1, got {rate!r}")
        self.rate = float(rate)
        kinds = spec.get("kinds", defaults)
        if not isinstance(kinds, list) or not kinds or any(str(k) not in allowed for k in kinds):
            raise error(f"{name}.kinds must be a non-empty list of {', '.join(allowed)}; got {kinds!r}")
        self.kinds = [str(k) for k in kinds]
        delay = spec.get("delayMs", 0)
        if not isinstance(delay, (int, float)) or delay < 0:
            raise error(f"{name}.delayMs must be a number >= 0, got {delay!r}")
        self.delay = float(delay) / 1000.0
        limit = spec.get("limit")
        if limit is not None and (not isinstance(limit, int) or limit < 0):
            raise error(f"{name}.limit must be an integer >= 0, got {limit!r}")
        self.limit = limit
        self.filters = {}
        for key in filters:
            value = spec.get(key)
            if value is None:
                continue
            if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
                raise error(f"{name}.{key} must be a list of strings, got {value!r}")
            self.filters[key] = set(value)
        unknown = set(spec) - {"rate", "kinds", "delayMs", "limit", "retryAfterSeconds", *filters}
        if unknown:
            raise error(f"unknown {name} fault settings {sorted(unknown)}")
        self.retry_after = int(spec.get("retryAfterSeconds", 1))
        self.spec = dict(spec)
        self.seen: dict[str, int] = {}  # operation key -> calls in scope so far
        self.stats = {"calls": 0, "inScope": 0, "failed": 0, "byKind": {}, "byOperation": {}}

    def decide(self, service: str, operation: str, in_scope: bool) -> str | None:
        """Count the call; the kind to inject, or None."""
        key = f"{service}:{operation}"
        with _LOCK:
            self.stats["calls"] += 1
            per = self.stats["byOperation"].setdefault(key, {"calls": 0, "failed": 0, "byKind": {}})
            per["calls"] += 1
            if not in_scope:
                return None
            self.stats["inScope"] += 1
            n = self.seen[key] = self.seen.get(key, 0) + 1
            if self.limit is not None and self.stats["failed"] >= self.limit:
                return None
            digest = hashlib.sha256(f"{self.seed}|{self.name}|{key}|{n}".encode()).digest()
            draw = int.from_bytes(digest[:8], "big") / 2.0**64
            if draw >= self.rate:
                return None
            kind = self.kinds[int.from_bytes(digest[8:12], "big") % len(self.kinds)]
            self.stats["failed"] += 1
            self.stats["byKind"][kind] = self.stats["byKind"].get(kind, 0) + 1
            per["failed"] += 1
            per["byKind"][kind] = per["byKind"].get(kind, 0) + 1
            return kind


_AWS: _Section | None = None
_KUBE: _Section | None = None
_SEED = 0


def reset() -> None:
    """No faults, counters cleared (the `reset` op)."""
    global _AWS, _KUBE, _SEED
    _AWS = _KUBE = None
    _SEED = 0


def _drop_connection(sock) -> None:
    """Make the connection end without an answer: linger 0, so that closing it sends a
    TCP RST, and no more reading, so that the server closes it at once."""
    if sock is None:
        return
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
    except OSError:
        pass
    try:
        sock.shutdown(socket.SHUT_RD)
    except OSError:
        pass


# --------------------------------------------------------------------------
# AWS: which service and operation a request is
# --------------------------------------------------------------------------

_MODELS: dict[str, dict | None] = {}
_CREDENTIAL = re.compile(r"Credential=[^/]+/[^/]+/([^/]+)/([^/]+)/")


def _model(service: str) -> dict | None:
    """botocore's service model for a signing name (protocol, metadata, HTTP routes)."""
    if service in _MODELS:
        return _MODELS[service]
    model = None
    try:
        import botocore.loaders

        loader = botocore.loaders.Loader()
        names = {"monitoring": "cloudwatch", "execute-api": "apigateway"}
        model = loader.load_service_model(names.get(service, service), "service-2")
    except Exception:
        model = None
    if model is not None:
        routes = []
        for name, op in model.get("operations", {}).items():
            http = op.get("http") or {}
            uri = (http.get("requestUri") or "/").split("?", 1)[0]
            literal = re.split(r"\{[^}]+\}", uri)
            labels = re.findall(r"\{([^}]+)\}", uri)
            rx = "".join(
                re.escape(part) + ((".+" if labels[i].endswith("+") else "[^/]+") if i < len(labels) else "")
                for i, part in enumerate(literal)
            )
            rx = "^" + rx + "/?$"
            routes.append((http.get("method", "POST"), re.compile(rx), uri.count("{"), name))
        # Most specific first: fewer path parameters, then longer patterns.
        routes.sort(key=lambda r: (r[2], -len(r[1].pattern)))
        model = {"metadata": model.get("metadata", {}), "routes": routes}
    _MODELS[service] = model
    return model


def _aws_identity(environ: dict) -> tuple[str, str, str, dict | None]:
    """(service, operation, protocol, model) of a moto request. Reads and puts back the
    body of form-encoded requests (awsQuery / EC2 carry the operation there)."""
    m = _CREDENTIAL.search(environ.get("HTTP_AUTHORIZATION") or "")
    service = m.group(2) if m else ""
    target = environ.get("HTTP_X_AMZ_TARGET") or ""
    if not service and target.startswith("DynamoDB"):
        service = "dynamodb"
    model = _model(service) if service else None
    protocol = (model or {}).get("metadata", {}).get("protocol") or ("json" if target else "query")
    operation = ""
    if target:
        operation = target.rsplit(".", 1)[-1]
    elif protocol in ("query", "ec2"):
        qs = parse_qs(environ.get("QUERY_STRING") or "")
        action = (qs.get("Action") or [""])[0]
        if not action and (environ.get("CONTENT_TYPE") or "").startswith("application/x-www-form-urlencoded"):
            length = int(environ.get("CONTENT_LENGTH") or 0)
            raw = environ["wsgi.input"].read(length) if length else b""
            environ["wsgi.input"] = io.BytesIO(raw)
            action = (parse_qs(raw.decode("utf-8", "replace")).get("Action") or [""])[0]
        operation = action
    elif model is not None:
        method = environ.get("REQUEST_METHOD", "GET")
        path = unquote(environ.get("PATH_INFO") or "/")
        for verb, rx, _, name in model["routes"]:
            if verb == method and rx.match(path):
                operation = name
                break
    if not operation:
        operation = f"{environ.get('REQUEST_METHOD', 'GET')} {environ.get('PATH_INFO', '/')}"
    return service or "unknown", operation, protocol, model


_DYNAMODB_ITEM_OPS = {
    "GetItem", "PutItem", "UpdateItem", "DeleteItem", "Query", "Scan", "BatchGetItem",
    "BatchWriteItem", "TransactGetItems", "TransactWriteItems",
}


def _aws_error(kind: str, service: str, operation: str, protocol: str, model: dict | None):
    """(status, headers, body) of the error the real service sends for `kind`."""
    meta = (model or {}).get("metadata", {})
    request_id = str(uuid.uuid4())
    denied = (
        f"User: arn:aws:sts::123456789012:assumed-role/fakecloud/session is not authorized to perform: "
        f"{service}:{operation} because no identity-based policy allows the {service}:{operation} action"
    )
    if protocol == "ec2":
        code, status, message = {
            "throttle": ("RequestLimitExceeded", 503, "Request limit exceeded."),
            "500": ("InternalError", 500, "An internal error has occurred"),
            "503": ("Unavailable", 503, "The server is overloaded and can't handle the request"),
            "access_denied": ("UnauthorizedOperation", 403, f"You are not authorized to perform this operation. {denied}"),
        }[kind]
        body = (
            '<?xml version="1.0" encoding="UTF-8"?>\n'
            f"<Response><Errors><Error><Code>{code}</Code><Message>{message}</Message></Error></Errors>"
            f"<RequestID>{request_id}</RequestID></Response>"
        )
        return status, [("Content-Type", "text/xml;charset=UTF-8")], body.encode()
    if protocol == "query":
        code, status, typ, message = {
            "throttle": ("Throttling", 400, "Sender", "Rate exceeded"),
            "500": ("InternalFailure", 500, "Receiver", "An internal error occurred."),
            "503": ("ServiceUnavailable", 503, "Receiver", "The request has failed due to a temporary failure of the server."),
            "access_denied": ("AccessDenied", 403, "Sender", denied),
        }[kind]
        ns = meta.get("xmlNamespace") or ""
        body = (
            f'<ErrorResponse xmlns="{ns}"><Error><Type>{typ}</Type><Code>{code}</Code>'
            f"<Message>{message}</Message></Error><RequestId>{request_id}</RequestId></ErrorResponse>"
        )
        return status, [("Content-Type", "text/xml"), ("x-amzn-RequestId", request_id)], body.encode()
    if protocol in ("rest-json", "rest-xml"):
        code, status, message = {
            "throttle": ("ThrottlingException", 429, "Rate exceeded"),
            "500": ("ServerException", 500, "An internal server error occurred."),
            "503": ("ServiceUnavailableException", 503, "The service is unavailable. Try again later."),
            "access_denied": ("AccessDeniedException", 403, denied),
        }[kind]
        headers = [("Content-Type", "application/json"), ("x-amzn-ErrorType", code),
                   ("x-amzn-RequestId", request_id)]
        return status, headers, json.dumps({"message": message}).encode()
    # awsJson 1.0 / 1.1
    if service == "dynamodb":
        ns = "com.amazonaws.dynamodb.v20120810#"
        throttle = (
            ("ProvisionedThroughputExceededException",
             "The level of configured provisioned throughput for the table was exceeded. "
             "Consider increasing your provisioning level with the UpdateTable API.")
            if operation in _DYNAMODB_ITEM_OPS
            else ("ThrottlingException", "Rate of requests exceeds the allowed throughput.")
        )
    else:
        ns = ""
        throttle = ("ThrottlingException", "Rate exceeded")
    code, status, message = {
        "throttle": (throttle[0], 400, throttle[1]),
        "500": ("InternalServerError", 500, "Internal server error"),
        "503": ("ServiceUnavailable", 503, "The service is currently unavailable or busy."),
        "access_denied": ("AccessDeniedException", 400, denied),
    }[kind]
    ctype = f"application/x-amz-json-{meta.get('jsonVersion') or '1.0'}"
    body = json.dumps({"__type": ns + code, "message": message}).encode()
    return status, [("Content-Type", ctype), ("x-amzn-RequestId", request_id)], body


def wrap_aws(original):
    """Wrap moto's DomainDispatcherApplication.__call__ (a WSGI app) with the faults."""

    def call(app, environ, start_response):
        section = _AWS
        if section is None:
            return original(app, environ, start_response)
        service, operation, protocol, model = _aws_identity(environ)
        f = section.filters
        in_scope = (not f.get("services") or service in f["services"]) and (
            not f.get("operations") or operation in f["operations"] or f"{service}:{operation}" in f["operations"]
        )
        if in_scope and section.delay:
            time.sleep(section.delay)
        kind = section.decide(service, operation, in_scope)
        if kind is None:
            return original(app, environ, start_response)
        if kind == "reset":
            # Read the body first: what is left unread would be parsed as the next request.
            length = int(environ.get("CONTENT_LENGTH") or 0)
            if length:
                environ["wsgi.input"].read(length)
            _drop_connection(environ.get("werkzeug.socket"))
            raise ConnectionResetError(f"fakecloud fault: reset {service}:{operation}")
        if kind == "reset_after":
            result = original(app, environ, lambda *a, **k: (lambda data: None))
            try:
                for _ in result:
                    pass
            finally:
                if hasattr(result, "close"):
                    result.close()
            _drop_connection(environ.get("werkzeug.socket"))
            raise ConnectionResetError(f"fakecloud fault: reset after {service}:{operation}")
        status, headers, body = _aws_error(kind, service, operation, protocol, model)
        reason = {400: "Bad Request", 403: "Forbidden", 429: "Too Many Requests", 500: "Internal Server Error",
                  503: "Service Unavailable"}[status]
        start_response(f"{status} {reason}", headers + [("Content-Length", str(len(body)))])
        return [body]

    return call


# --------------------------------------------------------------------------
# Kubernetes
# --------------------------------------------------------------------------


def kube_operation(method: str, path: str, query: str) -> tuple[str, str]:
    """(verb, resource[/subresource]) of an API request, as the API server names them
    (get, list, watch, create, update, patch, delete, deletecollection); non-resource
    paths are (verb, path)."""
    segs = [s for s in path.split("/") if s]
    rest = None
    if segs[:2] == ["api", "v1"]:
        rest = segs[2:]
    elif len(segs) >= 3 and segs[0] == "apis":
        rest = segs[3:]
    if not rest:
        return method.lower(), path
    if rest[0] == "namespaces" and len(rest) >= 3:
        rest = rest[2:]
    resource = rest[0]
    name = rest[1] if len(rest) > 1 else None
    if len(rest) > 2:
        resource = f"{resource}/{rest[2]}"
    watch = "watch=true" in (query or "") or "watch=1" in (query or "")
    verb = {
        "GET": "get" if name else ("watch" if watch else "list"),
        "POST": "create",
        "PUT": "update",
        "PATCH": "patch",
        "DELETE": "delete" if name else "deletecollection",
    }.get(method, method.lower())
    return verb, resource


def _kube_status(kind: str, retry_after: int) -> tuple[int, dict]:
    status = {"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure"}
    if kind == "429":
        status.update(message="Too many requests, please try again later.", reason="TooManyRequests",
                      details={"retryAfterSeconds": retry_after}, code=429)
    elif kind == "500":
        status.update(message="Internal error occurred: fakecloud fault injection", reason="InternalError",
                      details={"causes": [{"message": "fakecloud fault injection"}]}, code=500)
    else:
        status.update(message="the server is currently unable to handle the request", reason="ServiceUnavailable",
                      code=503)
    return status["code"], status


def kube_fault(cluster: str, method: str, path: str, query: str) -> tuple[str, int | None, dict | None] | None:
    """The fault for one authenticated Kubernetes API request of stand-in `cluster`, after
    its delay: None, or (kind, status, Status body) -- status and body None for the
    reset kinds (the caller drops the connection, before or after carrying the call out)."""
    section = _KUBE
    if section is None:
        return None
    verb, resource = kube_operation(method, path, query)
    f = section.filters
    in_scope = (
        (not f.get("clusters") or cluster in f["clusters"])
        and (not f.get("verbs") or verb in f["verbs"])
        and (not f.get("resources") or resource in f["resources"])
    )
    if in_scope and section.delay:
        time.sleep(section.delay)
    kind = section.decide(cluster, f"{verb} {resource}", in_scope)
    if kind is None:
        return None
    if kind in ("reset", "reset_after"):
        return kind, None, None
    status, body = _kube_status(kind, section.retry_after)
    return kind, status, body


def drop(sock) -> None:
    """End a Kubernetes API connection without an answer (see `_drop_connection`)."""
    _drop_connection(sock)


# --------------------------------------------------------------------------
# control ops
# --------------------------------------------------------------------------


def register(op, ControlError) -> None:  # noqa: N803 - class passed in
    @op("faults")
    def faults(args):
        """Set (a section given), clear (null) or keep (left out) the AWS and Kubernetes
        fault settings; answers the settings now in force."""
        global _AWS, _KUBE, _SEED
        seed = args.get("seed", _SEED)
        if not isinstance(seed, int):
            raise ControlError(f"seed must be an integer, got {seed!r}")
        sections = {}
        for name, allowed, defaults, filters in (
            ("aws", AWS_KINDS, DEFAULT_AWS_KINDS, ("services", "operations")),
            ("kube", KUBE_KINDS, DEFAULT_KUBE_KINDS, ("clusters", "verbs", "resources")),
        ):
            if name not in args:
                continue
            spec = args[name]
            if spec is None:
                sections[name] = None
            elif isinstance(spec, dict):
                sections[name] = _Section(name, spec, seed, allowed, defaults, filters, ControlError)
            else:
                raise ControlError(f"{name} must be an object or null")
        unknown = set(args) - {"aws", "kube", "seed", "region"}
        if unknown:
            raise ControlError(f"unknown faults arguments {sorted(unknown)}; known: aws, kube, seed")
        with _LOCK:
            _SEED = seed
            if "aws" in sections:
                _AWS = sections["aws"]
            if "kube" in sections:
                _KUBE = sections["kube"]
            return {"aws": _AWS.spec if _AWS else None, "kube": _KUBE.spec if _KUBE else None, "seed": _SEED}

    @op("fault_stats")
    def fault_stats(args):
        """Calls seen, in the faults' scope, failed (in total, per kind, per operation:
        `service:Operation` for AWS, `cluster:verb resource` for Kubernetes) since each
        section was last set."""
        empty = {"calls": 0, "inScope": 0, "failed": 0, "byKind": {}, "byOperation": {}}
        with _LOCK:
            return {
                "aws": json.loads(json.dumps(_AWS.stats)) if _AWS else empty,
                "kube": json.loads(json.dumps(_KUBE.stats)) if _KUBE else empty,
            }
