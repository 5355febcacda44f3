"""Kubernetes API server stand-in, one HTTPS server per fake EKS cluster.

It answers the calls nodecycle makes the way a real kube-apiserver (plus the
controllers and kubelets behind it) would: same JSON shapes, same Status error
bodies, EKS-style bearer-token authentication. See README.md for what is and
is not modelled; the notable simplifications are listed there and next to the
code that makes them.
"""

from __future__ import annotations

import base64
import copy
import datetime as _dt
import hashlib
import hmac
import json
import math
import os
import re
import secrets
import shutil
import sys
import ssl
import tempfile
import threading
import time
import uuid
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import quote, unquote, urlsplit

import faults

DEFAULT_REGION = "us-east-2"
ACCOUNT_ID = "123456789012"

# Credentials the bearer tokens must be signed with (the SDK's static test
# credentials). Change with the `kube_auth` control op.
AUTH = {
    "access_key": os.environ.get("FAKECLOUD_ACCESS_KEY_ID", "testing"),
    "secret_key": os.environ.get("FAKECLOUD_SECRET_ACCESS_KEY", "testing"),
}
TOKEN_PREFIX = "k8s-aws-v1."
TOKEN_MAX_AGE = 15 * 60  # aws-iam-authenticator accepts a presigned URL for 15 minutes
EMPTY_SHA256 = hashlib.sha256(b"").hexdigest()

CLUSTERS: dict[tuple[str, str], "KubeCluster"] = {}
_CLUSTERS_LOCK = threading.Lock()
_TMPDIR: str | None = None
_TICKER: threading.Thread | None = None
_STOP = threading.Event()


def _tmpdir() -> str:
    global _TMPDIR
    if _TMPDIR is None:
        _TMPDIR = tempfile.mkdtemp(prefix="fakecloud-kube-")
    return _TMPDIR


# --------------------------------------------------------------------------
# small helpers
# --------------------------------------------------------------------------


def now_utc() -> _dt.datetime:
    return _dt.datetime.now(_dt.timezone.utc)


def rfc3339(t: float | _dt.datetime | None = None) -> str:
    """metav1.Time: second precision, Z."""
    if t is None:
        t = now_utc()
    if isinstance(t, (int, float)):
        t = _dt.datetime.fromtimestamp(t, _dt.timezone.utc)
    return t.astimezone(_dt.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


def micro_time(t: _dt.datetime | None = None) -> str:
    """metav1.MicroTime."""
    t = t or now_utc()
    return t.astimezone(_dt.timezone.utc).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


RAND_ALPHABET = "bcdfghjklmnpqrstvwxz2456789"  # k8s.io/apimachinery/pkg/util/rand


def rand_suffix(n: int = 5) -> str:
    return "".join(secrets.choice(RAND_ALPHABET) for _ in range(n))


class ApiError(Exception):
    """An error answered as a metav1.Status body."""

    def __init__(self, code: int, reason: str, message: str, details: dict | None = None, status: str = "Failure"):
        super().__init__(message)
        self.code = code
        self.reason = reason
        self.message = message
        self.details = details
        self.status = status

    def body(self) -> dict:
        s: dict = {"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": self.status, "message": self.message}
        if self.reason:
            s["reason"] = self.reason
        if self.details is not None:
            s["details"] = self.details
        s["code"] = self.code
        return s


def qualified(res: "Resource") -> str:
    return res.plural if not res.group else f"{res.plural}.{res.group}"


def details_for(res: "Resource", name: str) -> dict:
    d = {"name": name}
    if res.group:
        d["group"] = res.group
    d["kind"] = res.plural
    return d


def not_found(res: "Resource", name: str) -> ApiError:
    return ApiError(404, "NotFound", f'{qualified(res)} "{name}" not found', details_for(res, name))


def already_exists(res: "Resource", name: str) -> ApiError:
    return ApiError(409, "AlreadyExists", f'{qualified(res)} "{name}" already exists', details_for(res, name))


def conflict(res: "Resource", name: str, why: str) -> ApiError:
    return ApiError(
        409, "Conflict", f'Operation cannot be fulfilled on {qualified(res)} "{name}": {why}', details_for(res, name)
    )


MODIFIED = "the object has been modified; please apply your changes to the latest version and try again"


def bad_request(message: str) -> ApiError:
    return ApiError(400, "BadRequest", message)


CAUSE_REASONS = {
    "Required value": "FieldValueRequired",
    "Invalid value": "FieldValueInvalid",
    "Too long": "FieldValueTooLong",
    "Forbidden": "FieldValueForbidden",
    "Unsupported value": "FieldValueNotSupported",
}


def invalid(res: "Resource", name: str, causes: list[tuple[str, str, str]]) -> ApiError:
    """422 like field.ErrorList.ToAggregate(): causes are (field, type, detail)."""
    parts = []
    for fld, typ, detail in causes:
        parts.append(f"{fld}: {typ}" + (f": {detail}" if detail else ""))
    msg = f'{res.kind} "{name}" is invalid: ' + (parts[0] if len(parts) == 1 else "[" + ", ".join(parts) + "]")
    d = details_for(res, name)
    d["causes"] = [
        {"reason": CAUSE_REASONS.get(typ, "FieldValueInvalid"), "message": f"{typ}" + (f": {detail}" if detail else ""),
         "field": fld}
        for fld, typ, detail in causes
    ]
    return ApiError(422, "Invalid", msg, d)


# --------------------------------------------------------------------------
# resources
# --------------------------------------------------------------------------


class Resource:
    def __init__(self, plural, kind, group, version, namespaced, fields):
        self.plural = plural
        self.kind = kind
        self.group = group
        self.version = version
        self.namespaced = namespaced
        self.fields = fields  # field selector label -> getter

    @property
    def api_version(self) -> str:
        return f"{self.group}/{self.version}" if self.group else self.version


def _get(obj, *path, default=None):
    cur = obj
    for p in path:
        if not isinstance(cur, dict) or p not in cur:
            return default
        cur = cur[p]
    return cur


def _s(v) -> str:
    if v is None:
        return ""
    if isinstance(v, bool):
        return "true" if v else "false"
    return str(v)


META_FIELDS = {
    "metadata.name": lambda o: _get(o, "metadata", "name"),
    "metadata.namespace": lambda o: _get(o, "metadata", "namespace"),
}
POD_FIELDS = dict(
    META_FIELDS,
    **{
        "spec.nodeName": lambda o: _get(o, "spec", "nodeName"),
        "spec.restartPolicy": lambda o: _get(o, "spec", "restartPolicy"),
        "spec.schedulerName": lambda o: _get(o, "spec", "schedulerName"),
        "spec.serviceAccountName": lambda o: _get(o, "spec", "serviceAccountName"),
        "spec.hostNetwork": lambda o: bool(_get(o, "spec", "hostNetwork", default=False)),
        "status.phase": lambda o: _get(o, "status", "phase"),
        "status.podIP": lambda o: _get(o, "status", "podIP"),
        "status.nominatedNodeName": lambda o: _get(o, "status", "nominatedNodeName"),
    },
)
NODE_FIELDS = {
    "metadata.name": lambda o: _get(o, "metadata", "name"),
    "spec.unschedulable": lambda o: bool(_get(o, "spec", "unschedulable", default=False)),
}
EVENT_FIELDS = dict(
    META_FIELDS,
    **{
        f"involvedObject.{k}": (lambda k: lambda o: _get(o, "involvedObject", k))(k)
        for k in ("kind", "namespace", "name", "uid", "apiVersion", "resourceVersion", "fieldPath")
    },
    **{
        "reason": lambda o: o.get("reason"),
        "reportingComponent": lambda o: o.get("reportingComponent"),
        "source": lambda o: _get(o, "source", "component"),
        "type": lambda o: o.get("type"),
    },
)
# events.k8s.io/v1 names for the same fields (lenient: both sets are accepted).
EVENT_FIELDS.update(
    {
        **{
            f"regarding.{k}": (lambda k: lambda o: _get(o, "involvedObject", k))(k)
            for k in ("kind", "namespace", "name", "uid", "apiVersion", "resourceVersion", "fieldPath")
        },
        "reportingController": lambda o: o.get("reportingComponent"),
    }
)

NODES = Resource("nodes", "Node", "", "v1", False, NODE_FIELDS)
PODS = Resource("pods", "Pod", "", "v1", True, POD_FIELDS)
PDBS = Resource("poddisruptionbudgets", "PodDisruptionBudget", "policy", "v1", True, dict(META_FIELDS))
EVENTS = Resource("events", "Event", "", "v1", True, EVENT_FIELDS)
EVENTS_V1 = Resource("events", "Event", "events.k8s.io", "v1", True, EVENT_FIELDS)
RBAC_GROUP = "rbac.authorization.k8s.io"
CLUSTERROLES = Resource("clusterroles", "ClusterRole", RBAC_GROUP, "v1", False, dict(META_FIELDS))
CLUSTERROLEBINDINGS = Resource("clusterrolebindings", "ClusterRoleBinding", RBAC_GROUP, "v1", False, dict(META_FIELDS))
ROLES = Resource("roles", "Role", RBAC_GROUP, "v1", True, dict(META_FIELDS))
ROLEBINDINGS = Resource("rolebindings", "RoleBinding", RBAC_GROUP, "v1", True, dict(META_FIELDS))
RBAC_RESOURCES = (CLUSTERROLES, CLUSTERROLEBINDINGS, ROLES, ROLEBINDINGS)


# --------------------------------------------------------------------------
# selectors
# --------------------------------------------------------------------------


def parse_field_selector(sel: str, res: Resource):
    """k8s.io/apimachinery/pkg/fields: comma-AND of key=value, key==value,
    key!=value; backslash escapes. Unknown keys are a 400 like the real server."""
    if not sel:
        return []
    terms, cur, i = [], "", 0
    while i < len(sel):
        c = sel[i]
        if c == "\\" and i + 1 < len(sel):
            cur += sel[i : i + 2]
            i += 2
            continue
        if c == ",":
            terms.append(cur)
            cur = ""
        else:
            cur += c
        i += 1
    terms.append(cur)
    reqs = []
    for t in terms:
        if not t:
            continue
        m = re.match(r"^(.*?)(!=|==|=)(.*)$", t)
        if not m:
            raise bad_request(f"invalid selector: '{sel}'; can't understand '{t}'")
        key, op, val = m.group(1), m.group(2), re.sub(r"\\(.)", r"\1", m.group(3))
        if key not in res.fields:
            raise bad_request(f"field label not supported: {key}")
        reqs.append((key, op != "!=", val))
    return reqs


def field_match(reqs, res: Resource, obj) -> bool:
    for key, eq, val in reqs:
        actual = _s(res.fields[key](obj))
        if (actual == val) != eq:
            return False
    return True


_LABEL_TOKEN = re.compile(r"\s*(!=|==|=|\(|\)|,|!|[^\s!=(),<>]+|<|>)")


def parse_label_selector(sel: str):
    """k8s.io/apimachinery/pkg/labels selector syntax."""
    if not sel or not sel.strip():
        return []
    toks = []
    pos = 0
    s = sel.strip()
    while pos < len(s):
        m = _LABEL_TOKEN.match(s, pos)
        if not m or m.end() == pos:
            raise bad_request(f"unable to parse requirement: invalid label selector {sel!r}")
        toks.append(m.group(1))
        pos = m.end()
        while pos < len(s) and s[pos].isspace():
            pos += 1
    reqs, i = [], 0

    def need(cond, what):
        if not cond:
            raise bad_request(f"unable to parse requirement: {what} in label selector {sel!r}")

    while i < len(toks):
        if toks[i] == "!":
            need(i + 1 < len(toks), "missing key after '!'")
            reqs.append((toks[i + 1], "!", None))
            i += 2
        else:
            key = toks[i]
            need(key not in ("=", "==", "!=", ",", "(", ")"), f"unexpected {key!r}")
            i += 1
            if i >= len(toks) or toks[i] == ",":
                reqs.append((key, "exists", None))
            elif toks[i] in ("=", "==", "!="):
                op = "!=" if toks[i] == "!=" else "="
                val = ""
                if i + 1 < len(toks) and toks[i + 1] != ",":
                    val = toks[i + 1]
                    i += 1
                reqs.append((key, op, val))
                i += 1
            elif toks[i] in ("in", "notin"):
                op = toks[i]
                i += 1
                need(i < len(toks) and toks[i] == "(", "expected '('")
                i += 1
                vals = []
                while i < len(toks) and toks[i] != ")":
                    if toks[i] != ",":
                        vals.append(toks[i])
                    i += 1
                need(i < len(toks), "expected ')'")
                i += 1
                reqs.append((key, op, set(vals)))
            elif toks[i] in ("<", ">"):
                op = toks[i]
                need(i + 1 < len(toks), "missing value")
                try:
                    int(toks[i + 1])
                except ValueError:
                    raise bad_request(f"unable to parse requirement: for 'Gt', 'Lt' operators, the value must be an integer")
                reqs.append((key, op, int(toks[i + 1])))
                i += 2
            else:
                raise bad_request(f"unable to parse requirement: unexpected {toks[i]!r} in label selector {sel!r}")
        if i < len(toks):
            need(toks[i] == ",", f"expected ',' got {toks[i]!r}")
            i += 1
    return reqs


def label_match(reqs, labels: dict | None) -> bool:
    labels = labels or {}
    for key, op, val in reqs:
        has = key in labels
        v = labels.get(key)
        if op == "exists" and not has:
            return False
        if op == "!" and has:
            return False
        if op == "=" and v != val:
            return False
        if op == "!=" and has and v == val:
            return False
        if op == "in" and (not has or v not in val):
            return False
        if op == "notin" and has and v in val:
            return False
        if op in ("<", ">"):
            try:
                n = int(v) if has else None
            except ValueError:
                n = None
            if n is None or (op == "<" and not n < val) or (op == ">" and not n > val):
                return False
    return True


def selector_from_label_selector(ls: dict | None):
    """metav1.LabelSelector -> requirement list; None when it selects nothing
    (nil or empty selector in a PDB matches no pods)."""
    if not ls:
        return None
    reqs = []
    for k, v in (ls.get("matchLabels") or {}).items():
        reqs.append((k, "=", v))
    for e in ls.get("matchExpressions") or []:
        op = e.get("operator")
        vals = set(e.get("values") or [])
        if op == "In":
            reqs.append((e["key"], "in", vals))
        elif op == "NotIn":
            reqs.append((e["key"], "notin", vals))
        elif op == "Exists":
            reqs.append((e["key"], "exists", None))
        elif op == "DoesNotExist":
            reqs.append((e["key"], "!", None))
        else:
            return None  # invalid selector: matches nothing
    return reqs or None


# --------------------------------------------------------------------------
# patches
# --------------------------------------------------------------------------


def merge_patch(target, patch):
    """RFC 7386 JSON merge patch."""
    if not isinstance(patch, dict):
        return copy.deepcopy(patch)
    result = dict(target) if isinstance(target, dict) else {}
    for k, v in patch.items():
        if v is None:
            result.pop(k, None)
        else:
            result[k] = merge_patch(result.get(k), v)
    return result


# Lists that strategic merge patch merges by key instead of replacing (the
# patchStrategy=merge fields nodecycle is likely to touch); other lists
# (e.g. node spec.taints, which has no patch strategy) are replaced.
SMP_MERGE_KEYS = {
    ("metadata", "ownerReferences"): "uid",
    ("metadata", "finalizers"): None,  # set of primitives
    ("status", "conditions"): "type",
    ("status", "addresses"): "type",
    ("spec", "containers"): "name",
    ("spec", "initContainers"): "name",
    ("spec", "tolerations"): None,
}


def strategic_merge_patch(target, patch, path=()):
    """Strategic merge patch, simplified: a merge patch whose lists are
    replaced, except the merge-keyed lists above; honours `$patch: delete`
    and `$patch: replace` on maps and ignores `$setElementOrder`/`$retainKeys`
    directives."""
    if not isinstance(patch, dict):
        return copy.deepcopy(patch)
    directive = patch.get("$patch")
    if directive == "delete":
        return None
    if directive == "replace":
        return {k: copy.deepcopy(v) for k, v in patch.items() if not k.startswith("$")}
    result = dict(target) if isinstance(target, dict) else {}
    for k, v in patch.items():
        if k.startswith("$"):
            continue
        sub = path + (k,)
        if v is None:
            result.pop(k, None)
        elif isinstance(v, list) and sub[-2:] in SMP_MERGE_KEYS and isinstance(result.get(k), list):
            mkey = SMP_MERGE_KEYS[sub[-2:]]
            cur = copy.deepcopy(result[k])
            for item in v:
                if mkey is None:
                    if item not in cur:
                        cur.append(copy.deepcopy(item))
                    continue
                if not isinstance(item, dict):
                    continue
                idx = next((i for i, c in enumerate(cur) if isinstance(c, dict) and c.get(mkey) == item.get(mkey)), None)
                if item.get("$patch") == "delete":
                    if idx is not None:
                        cur.pop(idx)
                elif idx is None:
                    cur.append({a: b for a, b in item.items() if not a.startswith("$")})
                else:
                    cur[idx] = strategic_merge_patch(cur[idx], item, sub)
            result[k] = cur
        else:
            merged = strategic_merge_patch(result.get(k), v, sub)
            if merged is None and isinstance(v, dict) and v.get("$patch") == "delete":
                result.pop(k, None)
            else:
                result[k] = merged
    return result


class JsonPatchError(Exception):
    pass


def _pointer(path: str):
    if path == "":
        return []
    if not path.startswith("/"):
        raise JsonPatchError(f"invalid JSON pointer {path!r}")
    return [p.replace("~1", "/").replace("~0", "~") for p in path[1:].split("/")]


def _resolve(doc, parts):
    cur = doc
    for p in parts:
        if isinstance(cur, dict):
            if p not in cur:
                raise JsonPatchError(f"path not found: /{'/'.join(parts)}")
            cur = cur[p]
        elif isinstance(cur, list):
            try:
                cur = cur[int(p)]
            except (ValueError, IndexError):
                raise JsonPatchError(f"path not found: /{'/'.join(parts)}")
        else:
            raise JsonPatchError(f"path not found: /{'/'.join(parts)}")
    return cur


def _add(doc, parts, value, replace=False):
    if not parts:
        return value
    parent = _resolve(doc, parts[:-1])
    last = parts[-1]
    if isinstance(parent, dict):
        if replace and last not in parent:
            raise JsonPatchError(f"replace operation does not apply: doc is missing key: /{'/'.join(parts)}")
        parent[last] = value
    elif isinstance(parent, list):
        if last == "-" and not replace:
            parent.append(value)
        else:
            try:
                i = int(last)
            except ValueError:
                raise JsonPatchError(f"invalid array index {last!r}")
            if replace:
                if not 0 <= i < len(parent):
                    raise JsonPatchError("replace operation does not apply: index out of range")
                parent[i] = value
            else:
                if not 0 <= i <= len(parent):
                    raise JsonPatchError("add operation does not apply: index out of range")
                parent.insert(i, value)
    else:
        raise JsonPatchError(f"cannot add to /{'/'.join(parts[:-1])}")
    return doc


def _remove(doc, parts):
    if not parts:
        raise JsonPatchError("cannot remove the whole document")
    parent = _resolve(doc, parts[:-1])
    last = parts[-1]
    if isinstance(parent, dict):
        if last not in parent:
            raise JsonPatchError(f"remove operation does not apply: doc is missing path: /{'/'.join(parts)}")
        return parent.pop(last)
    if isinstance(parent, list):
        try:
            return parent.pop(int(last))
        except (ValueError, IndexError):
            raise JsonPatchError("remove operation does not apply: index out of range")
    raise JsonPatchError(f"cannot remove /{'/'.join(parts)}")


def json_patch(doc, ops):
    """RFC 6902."""
    if not isinstance(ops, list):
        raise ValueError("a JSON patch must be a list of operations")
    doc = copy.deepcopy(doc)
    for o in ops:
        if not isinstance(o, dict) or "op" not in o or "path" not in o:
            raise ValueError(f"invalid JSON patch operation {o!r}")
        op = o["op"]
        parts = _pointer(o["path"])
        if op == "add":
            doc = _add(doc, parts, copy.deepcopy(o.get("value")))
        elif op == "remove":
            _remove(doc, parts)
        elif op == "replace":
            doc = _add(doc, parts, copy.deepcopy(o.get("value")), replace=True)
        elif op == "move":
            val = _remove(doc, _pointer(o["from"]))
            doc = _add(doc, parts, val)
        elif op == "copy":
            val = copy.deepcopy(_resolve(doc, _pointer(o["from"])))
            doc = _add(doc, parts, val)
        elif op == "test":
            if _resolve(doc, parts) != o.get("value"):
                raise JsonPatchError(f"testing value {o['path']} failed: test failed")
        else:
            raise ValueError(f"Unexpected kind: {op}")
    return doc


# --------------------------------------------------------------------------
# SigV4 token verification (EKS / aws-iam-authenticator style)
# --------------------------------------------------------------------------

ALLOWED_TOKEN_PARAMS = {
    "action",
    "version",
    "x-amz-algorithm",
    "x-amz-credential",
    "x-amz-date",
    "x-amz-expires",
    "x-amz-signedheaders",
    "x-amz-signature",
    "x-amz-security-token",
}


def _hmac(key: bytes, msg: str) -> bytes:
    return hmac.new(key, msg.encode(), hashlib.sha256).digest()


def sigv4_signing_key(secret: str, date: str, region: str, service: str) -> bytes:
    k = _hmac(("AWS4" + secret).encode(), date)
    k = _hmac(k, region)
    k = _hmac(k, service)
    return _hmac(k, "aws4_request")


def _uri_encode(s: str) -> str:
    return quote(s, safe="-_.~")


def verify_token(authorization: str | None, cluster: str, now: float | None = None,
                 account: str = ACCOUNT_ID) -> str | None:
    """None when the bearer token is a valid presigned STS GetCallerIdentity
    URL for `cluster`, else the reason it is not (logged, never sent). Signed with the test
    credentials (the default account's) or with an assumed role's credentials moto issued; the
    principal must be of the cluster's `account` (a cross-account principal has no access entry)."""
    if not authorization:
        return "no Authorization header"
    scheme, _, token = authorization.strip().partition(" ")
    if scheme.lower() != "bearer" or not token.strip():
        return "not a Bearer token"
    token = token.strip()
    if not token.startswith(TOKEN_PREFIX):
        return f"token does not start with {TOKEN_PREFIX}"
    b64 = token[len(TOKEN_PREFIX) :]
    if not b64 or not re.fullmatch(r"[A-Za-z0-9_-]+", b64):
        return "token is not unpadded base64url"
    try:
        url = base64.urlsafe_b64decode(b64 + "=" * (-len(b64) % 4)).decode("utf-8")
    except Exception:
        return "token is not base64url of a UTF-8 URL"
    parts = urlsplit(url)
    if parts.scheme != "https":
        return "presigned URL is not https"
    host = parts.netloc
    m = re.fullmatch(r"sts(?:\.([a-z0-9-]+))?\.amazonaws\.com", host)
    if not m:
        return f"unexpected host {host!r}"
    host_region = m.group(1) or "us-east-1"
    if parts.path not in ("", "/"):
        return f"unexpected path {parts.path!r}"
    if parts.fragment:
        return "URL has a fragment"
    params: dict[str, str] = {}
    for pair in parts.query.split("&") if parts.query else []:
        k, sep, v = pair.partition("=")
        k, v = unquote(k), unquote(v)
        if k.lower() not in ALLOWED_TOKEN_PARAMS:
            return f"non-allowlisted query parameter {k!r}"
        if k in params:
            return f"duplicate query parameter {k!r}"
        params[k] = v
    if params.get("Action") != "GetCallerIdentity":
        return "Action is not GetCallerIdentity"
    if params.get("Version") != "2011-06-15":
        return "Version is not 2011-06-15"
    if params.get("X-Amz-Algorithm") != "AWS4-HMAC-SHA256":
        return "X-Amz-Algorithm is not AWS4-HMAC-SHA256"
    for k in ("X-Amz-Credential", "X-Amz-Date", "X-Amz-Expires", "X-Amz-SignedHeaders", "X-Amz-Signature"):
        if k not in params:
            return f"missing {k}"
    signed = params["X-Amz-SignedHeaders"].split(";")
    if "x-k8s-aws-id" not in signed:
        return "x-k8s-aws-id is not a signed header"
    if sorted(set(signed)) != ["host", "x-k8s-aws-id"] or signed != sorted(signed):
        return f"unexpected signed headers {params['X-Amz-SignedHeaders']!r}"
    cred = params["X-Amz-Credential"].split("/")
    if len(cred) != 5 or cred[3] != "sts" or cred[4] != "aws4_request":
        return "malformed X-Amz-Credential"
    access_key, date, region = cred[0], cred[1], cred[2]
    secret, principal_account = AUTH["secret_key"], ACCOUNT_ID
    if access_key != AUTH["access_key"]:
        import accounts

        found = accounts.temp_secret(access_key)
        if found is None:
            return f"unknown access key {access_key!r}"
        secret, principal_account = found
    if principal_account != account:
        return f"principal of account {principal_account} has no access entry in this cluster of account {account}"
    if region != host_region:
        return f"credential scope region {region!r} does not match host {host!r}"
    try:
        signed_at = _dt.datetime.strptime(params["X-Amz-Date"], "%Y%m%dT%H%M%SZ").replace(tzinfo=_dt.timezone.utc)
    except ValueError:
        return "malformed X-Amz-Date"
    if signed_at.strftime("%Y%m%d") != date:
        return "X-Amz-Date does not match the credential scope date"
    try:
        expires = int(params["X-Amz-Expires"])
    except ValueError:
        return "malformed X-Amz-Expires"
    if not 0 < expires <= TOKEN_MAX_AGE:
        return f"X-Amz-Expires {expires} out of range"
    t = time.time() if now is None else now
    age = t - signed_at.timestamp()
    if age > TOKEN_MAX_AGE:
        return f"token expired ({int(age)} s old)"
    if age < -TOKEN_MAX_AGE:
        return "token signed in the future"
    canonical_query = "&".join(
        f"{_uri_encode(k)}={_uri_encode(v)}"
        for k, v in sorted((k, v) for k, v in params.items() if k != "X-Amz-Signature")
    )
    canonical_request = "\n".join(
        [
            "GET",
            "/",
            canonical_query,
            f"host:{host}\nx-k8s-aws-id:{cluster}\n",
            "host;x-k8s-aws-id",
            EMPTY_SHA256,
        ]
    )
    string_to_sign = "\n".join(
        [
            "AWS4-HMAC-SHA256",
            params["X-Amz-Date"],
            f"{date}/{region}/sts/aws4_request",
            hashlib.sha256(canonical_request.encode()).hexdigest(),
        ]
    )
    key = sigv4_signing_key(secret, date, region, "sts")
    expected = hmac.new(key, string_to_sign.encode(), hashlib.sha256).hexdigest()
    if not hmac.compare_digest(expected, params["X-Amz-Signature"]):
        return "signature does not match (wrong secret, cluster name or canonicalisation)"
    return None


def make_token(cluster: str, region: str = DEFAULT_REGION, at: _dt.datetime | None = None,
               access_key: str | None = None, secret_key: str | None = None, session_token: str | None = None) -> str:
    """A valid token, built the way aws-iam-authenticator does (test aid)."""
    at = at or now_utc()
    access_key = access_key or AUTH["access_key"]
    secret_key = secret_key or AUTH["secret_key"]
    host = f"sts.{region}.amazonaws.com"
    amz_date = at.strftime("%Y%m%dT%H%M%SZ")
    date = at.strftime("%Y%m%d")
    params = {
        "Action": "GetCallerIdentity",
        "Version": "2011-06-15",
        "X-Amz-Algorithm": "AWS4-HMAC-SHA256",
        "X-Amz-Credential": f"{access_key}/{date}/{region}/sts/aws4_request",
        "X-Amz-Date": amz_date,
        "X-Amz-Expires": "60",
        "X-Amz-SignedHeaders": "host;x-k8s-aws-id",
    }
    if session_token:
        params["X-Amz-Security-Token"] = session_token
    cq = "&".join(f"{_uri_encode(k)}={_uri_encode(v)}" for k, v in sorted(params.items()))
    creq = "\n".join(["GET", "/", cq, f"host:{host}\nx-k8s-aws-id:{cluster}\n", "host;x-k8s-aws-id", EMPTY_SHA256])
    sts = "\n".join(["AWS4-HMAC-SHA256", amz_date, f"{date}/{region}/sts/aws4_request", hashlib.sha256(creq.encode()).hexdigest()])
    sig = hmac.new(sigv4_signing_key(secret_key, date, region, "sts"), sts.encode(), hashlib.sha256).hexdigest()
    url = f"https://{host}/?{cq}&X-Amz-Signature={sig}"
    return TOKEN_PREFIX + base64.urlsafe_b64encode(url.encode()).decode().rstrip("=")


# --------------------------------------------------------------------------
# TLS
# --------------------------------------------------------------------------


def make_tls(cluster: str, directory: str) -> tuple[str, str, str]:
    """A per-cluster CA and a serving certificate for 127.0.0.1/localhost.
    Returns (ca_pem_path, cert_path, key_path)."""
    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID
    import ipaddress

    now = now_utc()
    ca_key = ec.generate_private_key(ec.SECP256R1())
    ca_name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "kubernetes")])
    ca = (
        x509.CertificateBuilder()
        .subject_name(ca_name)
        .issuer_name(ca_name)
        .public_key(ca_key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - _dt.timedelta(hours=1))
        .not_valid_after(now + _dt.timedelta(days=3650))
        .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
        .add_extension(
            x509.KeyUsage(
                digital_signature=True, content_commitment=False, key_encipherment=False, data_encipherment=False,
                key_agreement=False, key_cert_sign=True, crl_sign=True, encipher_only=False, decipher_only=False,
            ),
            critical=True,
        )
        .add_extension(x509.SubjectKeyIdentifier.from_public_key(ca_key.public_key()), critical=False)
        .sign(ca_key, hashes.SHA256())
    )
    key = ec.generate_private_key(ec.SECP256R1())
    cert = (
        x509.CertificateBuilder()
        .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "kube-apiserver")]))
        .issuer_name(ca_name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - _dt.timedelta(hours=1))
        .not_valid_after(now + _dt.timedelta(days=365))
        .add_extension(
            x509.SubjectAlternativeName(
                [
                    x509.IPAddress(ipaddress.ip_address("127.0.0.1")),
                    x509.DNSName("localhost"),
                    x509.DNSName("kubernetes"),
                    x509.DNSName("kubernetes.default.svc"),
                ]
            ),
            critical=False,
        )
        .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
        .add_extension(
            x509.KeyUsage(
                digital_signature=True, content_commitment=False, key_encipherment=False, data_encipherment=False,
                key_agreement=False, key_cert_sign=False, crl_sign=False, encipher_only=False, decipher_only=False,
            ),
            critical=True,
        )
        .add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.SERVER_AUTH]), critical=False)
        .add_extension(x509.AuthorityKeyIdentifier.from_issuer_public_key(ca_key.public_key()), critical=False)
        .sign(ca_key, hashes.SHA256())
    )
    safe = re.sub(r"[^A-Za-z0-9_.-]", "_", cluster)
    ca_path = os.path.join(directory, f"{safe}-ca.pem")
    cert_path = os.path.join(directory, f"{safe}-server.pem")
    key_path = os.path.join(directory, f"{safe}-server-key.pem")
    with open(ca_path, "wb") as f:
        f.write(ca.public_bytes(serialization.Encoding.PEM))
    with open(cert_path, "wb") as f:
        f.write(cert.public_bytes(serialization.Encoding.PEM))
    with open(key_path, "wb") as f:
        f.write(
            key.private_bytes(
                serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
            )
        )
    return ca_path, cert_path, key_path


# --------------------------------------------------------------------------
# pods, nodes, PDBs: semantics
# --------------------------------------------------------------------------


def pod_ready(pod) -> bool:
    for c in _get(pod, "status", "conditions", default=[]) or []:
        if c.get("type") == "Ready":
            return c.get("status") == "True"
    return False


def node_ready(node) -> bool:
    for c in _get(node, "status", "conditions", default=[]) or []:
        if c.get("type") == "Ready":
            return c.get("status") == "True"
    return False


def owner_controller(obj):
    for ref in _get(obj, "metadata", "ownerReferences", default=[]) or []:
        if ref.get("controller"):
            return ref
    return None


def is_daemonset_pod(pod) -> bool:
    ref = owner_controller(pod)
    return bool(ref and ref.get("kind") == "DaemonSet")


def is_mirror_pod(pod) -> bool:
    return "kubernetes.io/config.mirror" in (_get(pod, "metadata", "annotations", default={}) or {})


def pod_conditions(ready: bool, ts: str) -> list:
    st = "True" if ready else "False"
    conds = [
        {"type": "PodReadyToStartContainers", "status": "True", "lastProbeTime": None, "lastTransitionTime": ts},
        {"type": "Initialized", "status": "True", "lastProbeTime": None, "lastTransitionTime": ts},
        {"type": "Ready", "status": st, "lastProbeTime": None, "lastTransitionTime": ts},
        {"type": "ContainersReady", "status": st, "lastProbeTime": None, "lastTransitionTime": ts},
        {"type": "PodScheduled", "status": "True", "lastProbeTime": None, "lastTransitionTime": ts},
    ]
    if not ready:
        for c in conds[2:4]:
            c["reason"] = "ContainersNotReady"
            c["message"] = "containers with unready status: [app]"
    return conds


def node_conditions(ready: bool | None, ts: str, reason: str | None = None) -> list:
    def c(t, status, r, m):
        return {"type": t, "status": status, "lastHeartbeatTime": ts, "lastTransitionTime": ts, "reason": r, "message": m}

    if ready is None:  # kubelet stopped reporting
        u = "Kubelet stopped posting node status."
        return [
            c("MemoryPressure", "Unknown", "NodeStatusUnknown", u),
            c("DiskPressure", "Unknown", "NodeStatusUnknown", u),
            c("PIDPressure", "Unknown", "NodeStatusUnknown", u),
            c("Ready", "Unknown", "NodeStatusUnknown", u),
        ]
    return [
        c("MemoryPressure", "False", "KubeletHasSufficientMemory", "kubelet has sufficient memory available"),
        c("DiskPressure", "False", "KubeletHasNoDiskPressure", "kubelet has no disk pressure"),
        c("PIDPressure", "False", "KubeletHasSufficientPID", "kubelet has sufficient PID available"),
        c("Ready", "True", "KubeletReady", "kubelet is posting ready status")
        if ready
        else c("Ready", "False", reason or "KubeletNotReady", "container runtime network not ready: NetworkReady=false"),
    ]


def scaled_value(v, total: int) -> int:
    """intstr.GetScaledValueFromIntOrPercent(v, total, roundUp=true) — the
    disruption controller rounds UP for both minAvailable and maxUnavailable
    percentages (pkg/controller/disruption/disruption.go)."""
    if isinstance(v, int):
        return v
    s = str(v)
    if s.endswith("%"):
        return int(math.ceil(int(s[:-1]) * total / 100))
    return int(s)


# --------------------------------------------------------------------------
# the cluster
# --------------------------------------------------------------------------


class Store(dict):
    """One resource's objects by (namespace, name); logs every write."""

    def __init__(self, cluster: "KubeCluster", plural: str):
        super().__init__()
        self.cluster = cluster
        self.plural = plural

    def __setitem__(self, key, obj):
        typ = "MODIFIED" if key in self else "ADDED"
        super().__setitem__(key, obj)
        self.cluster.record(self.plural, key, typ, obj)

    def pop(self, key, *default):
        if key in self:
            obj = super().pop(key)
            self.cluster.record(self.plural, key, "DELETED", obj)
            return obj
        if default:
            return default[0]
        raise KeyError(key)


class KubeCluster:
    def __init__(self, name: str, region: str):
        self.name = name
        self.region = region
        # The AWS account of the EKS cluster (`create_kube`'s `account`): its nodes come from
        # that account's Auto Scaling groups and EC2 instances.
        self.account = ACCOUNT_ID
        self.lock = threading.RLock()
        self.rv = 1000
        # Every write goes through Store, which logs it for watches.
        self.changes: list[tuple[int, str, tuple[str, str], str, dict]] = []  # (rv, plural, key, type, object)
        self.changed = threading.Condition(self.lock)
        self.store: dict[str, Store] = {
            p: Store(self, p)
            for p in ("nodes", "pods", "poddisruptionbudgets", "events", "clusterroles", "clusterrolebindings",
                      "roles", "rolebindings")
        }
        self.terminating: dict[tuple[str, str], float] = {}  # pod key -> wall-clock deadline
        self.disrupted: dict[tuple[str, str], dict[str, float]] = {}  # pdb key -> {pod: time}
        self.scales: dict[tuple[str, str, str], int] = {}  # (ns, kind, name) -> replicas
        self.requests: list[dict] = []
        self.created_rv: dict[str, int] = {}  # uid -> resourceVersion at creation (for watch)
        self.sync: dict | None = None
        self.synced_instances: dict[str, str] = {}  # instance id -> node name
        self.server: ThreadingHTTPServer | None = None
        self.endpoint = ""
        self.ca_file = ""
        self.ca_data = ""
        self.stopped = False

    # -- infrastructure --------------------------------------------------

    def next_rv(self) -> str:
        self.rv += 1
        return str(self.rv)

    def touch(self, plural: str, key, obj: dict):
        """Record an in-place change: new resourceVersion, logged for watches."""
        obj["metadata"]["resourceVersion"] = self.next_rv()
        self.store[plural][key] = obj

    def record(self, plural: str, key, typ: str, obj: dict):
        with self.lock:
            snap = copy.deepcopy(obj)
            if typ == "DELETED":
                snap["metadata"]["resourceVersion"] = self.next_rv()
            self.changes.append((int(snap["metadata"].get("resourceVersion") or self.rv), plural, key, typ, snap))
            self.changed.notify_all()

    def eks_version(self) -> str:
        try:
            from moto.eks.models import eks_backends

            c = eks_backends[self.account][self.region].clusters.get(self.name)
            if c is not None:
                return str(c.version)
        except Exception:
            pass
        return "1.30"

    def start(self):
        ca_path, cert_path, key_path = make_tls(self.name, _tmpdir())
        ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        ctx.minimum_version = ssl.TLSVersion.TLSv1_2
        ctx.load_cert_chain(cert_path, key_path)
        ctx.set_alpn_protocols(["http/1.1"])
        cluster = self

        class Handler(KubeHandler):
            pass

        Handler.cluster = cluster
        server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        server.daemon_threads = True
        server.socket = ctx.wrap_socket(server.socket, server_side=True, do_handshake_on_connect=False)
        threading.Thread(target=server.serve_forever, name=f"kube-{self.name}", daemon=True).start()
        self.server = server
        self.endpoint = f"https://127.0.0.1:{server.server_address[1]}"
        self.ca_file = ca_path
        with open(ca_path, "rb") as f:
            self.ca_data = base64.b64encode(f.read()).decode()

    def stop(self):
        self.stopped = True
        if self.server is not None:
            try:
                self.server.shutdown()
                self.server.server_close()
            except Exception:
                pass

    def log(self, entry: dict):
        with self.lock:
            self.requests.append(entry)

    # -- object helpers --------------------------------------------------

    def stamp_new(self, res: Resource, obj: dict, ns: str):
        meta = obj.setdefault("metadata", {})
        meta["uid"] = str(uuid.uuid4())
        meta["resourceVersion"] = self.next_rv()
        self.created_rv[meta["uid"]] = self.rv
        meta["creationTimestamp"] = rfc3339()
        if res.namespaced:
            meta["namespace"] = ns
        else:
            meta.pop("namespace", None)
        for k in ("deletionTimestamp", "deletionGracePeriodSeconds", "selfLink"):
            meta.pop(k, None)
        if res is PDBS:
            meta["generation"] = 1
        obj["kind"] = res.kind
        obj["apiVersion"] = res.api_version

    def present(self, res: Resource, obj: dict, in_list: bool = False) -> dict:
        """The wire form of a stored object."""
        out = _json_copy(obj)
        if res is PDBS:
            out["status"] = self.pdb_status(obj)
        if res is CLUSTERROLES and isinstance(out.get("aggregationRule"), dict):
            out["rules"] = self.aggregated_rules(out)
        if res is EVENTS_V1:
            out = event_to_v1(out)
        else:
            out["kind"] = res.kind
            out["apiVersion"] = res.api_version
        if in_list:
            # Items of built-in list responses carry no kind/apiVersion.
            out.pop("kind", None)
            out.pop("apiVersion", None)
        return out

    def aggregated_rules(self, role: dict) -> list:
        """What the clusterrole-aggregation controller writes into `rules` of a
        ClusterRole with an `aggregationRule`: the rules of every other
        ClusterRole whose labels match one of `clusterRoleSelectors`, in name
        order, without duplicates (computed on read: no controller delay)."""
        selectors = [selector_from_label_selector(s) for s in role["aggregationRule"].get("clusterRoleSelectors") or []]
        rules: list = []
        for (_, name), other in sorted(self.store["clusterroles"].items()):
            if name == _get(role, "metadata", "name"):
                continue
            labels = _get(other, "metadata", "labels")
            if not any(sel is not None and label_match(sel, labels) for sel in selectors):
                continue
            for rule in other.get("rules") or []:
                if rule not in rules:
                    rules.append(copy.deepcopy(rule))
        return rules

    # -- the kubelet / controllers ----------------------------------------

    def tick(self):
        """Advance time-driven behaviour: finish graceful pod deletions,
        recreate DaemonSet pods, follow EC2 instances (sync_nodes)."""
        with self.lock:
            now = time.time()
            for key, deadline in list(self.terminating.items()):
                pod = self.store["pods"].get(key)
                if pod is None:
                    self.terminating.pop(key, None)
                    continue
                node_name = _get(pod, "spec", "nodeName")
                node = self.store["nodes"].get(("", node_name)) if node_name else None
                if node is not None and not node_ready(node):
                    continue  # no kubelet to finish the termination: stays Terminating
                if now >= deadline:
                    self.remove_pod(key)
            if self.sync is not None:
                try:
                    self.sync_nodes_once()
                except Exception as e:
                    import traceback

                    msg = traceback.format_exc()
                    if msg != self.sync.get("_last_error"):  # report each distinct failure once
                        self.sync["_last_error"] = msg
                        print(f"fakecloud kube {self.name}: sync_nodes failed: {e}\n{msg}", file=sys.stderr)

    def remove_pod(self, key):
        pod = self.store["pods"].pop(key, None)
        self.terminating.pop(key, None)
        if pod is None:
            return
        self.next_rv()
        node_name = _get(pod, "spec", "nodeName")
        if is_mirror_pod(pod) and node_name and ("", node_name) in self.store["nodes"]:
            # The kubelet recreates the mirror pod of its static pod.
            self.create_running_pod(pod, name=pod["metadata"]["name"])
        elif is_daemonset_pod(pod) and node_name and ("", node_name) in self.store["nodes"]:
            # The DaemonSet controller puts a new pod on the node.
            ref = owner_controller(pod)
            self.create_running_pod(pod, name=f"{ref['name']}-{rand_suffix()}")

    def create_running_pod(self, template: dict, name: str):
        pod = copy.deepcopy(template)
        ns = pod["metadata"]["namespace"]
        for k in ("uid", "resourceVersion", "creationTimestamp", "deletionTimestamp", "deletionGracePeriodSeconds"):
            pod["metadata"].pop(k, None)
        pod["metadata"]["name"] = name
        if not is_mirror_pod(pod) and is_daemonset_pod(pod):
            pod["metadata"]["generateName"] = owner_controller(pod)["name"] + "-"
        self.stamp_new(PODS, pod, ns)
        ts = rfc3339()
        pod["status"] = {
            "phase": "Running",
            "conditions": pod_conditions(True, ts),
            "hostIP": _get(template, "status", "hostIP"),
            "podIP": _get(template, "status", "podIP"),
            "startTime": ts,
            "qosClass": _get(template, "status", "qosClass", default="BestEffort"),
        }
        pod["status"] = {k: v for k, v in pod["status"].items() if v is not None}
        self.store["pods"][(ns, name)] = pod
        return pod

    def delete_pod(self, key, grace: int | None, preconditions: dict | None, dry_run: bool) -> dict:
        """Graceful deletion as the apiserver + kubelet do it. Returns the
        object the DELETE answers with."""
        pod = self.store["pods"].get(key)
        if pod is None:
            raise not_found(PODS, key[1])
        check_preconditions(PODS, pod, preconditions)
        if dry_run:
            return copy.deepcopy(pod)
        spec_grace = _get(pod, "spec", "terminationGracePeriodSeconds")
        if grace is None:
            grace = 30 if spec_grace is None else int(spec_grace)
        if grace < 0:
            grace = 1
        if not _get(pod, "spec", "nodeName") or _get(pod, "status", "phase") in ("Succeeded", "Failed"):
            grace = 0  # unscheduled or terminal pods go at once
        meta = pod["metadata"]
        if grace == 0 or is_mirror_pod(pod):
            # Mirror pods: simplified, removed at once (the kubelet then
            # recreates them, see remove_pod).
            out = copy.deepcopy(pod)
            self.remove_pod(key)
            return out
        now = time.time()
        if meta.get("deletionTimestamp"):
            current = self.terminating.get(key, now)
            if now + grace < current:  # a shorter grace period wins
                self.terminating[key] = now + grace
                meta["deletionTimestamp"] = rfc3339(now + grace)
                meta["deletionGracePeriodSeconds"] = grace
                self.touch("pods", key, pod)
            return copy.deepcopy(pod)
        self.terminating[key] = now + grace
        meta["deletionTimestamp"] = rfc3339(now + grace)
        meta["deletionGracePeriodSeconds"] = grace
        self.touch("pods", key, pod)
        return copy.deepcopy(pod)

    # -- PDBs ----------------------------------------------------------

    def pdb_pods(self, pdb) -> list:
        reqs = selector_from_label_selector(_get(pdb, "spec", "selector"))
        if reqs is None:
            return []
        ns = pdb["metadata"]["namespace"]
        return [
            p
            for (pns, _), p in sorted(self.store["pods"].items())
            if pns == ns and label_match(reqs, _get(p, "metadata", "labels"))
        ]

    def expected_scale(self, pods) -> int:
        """Sum of the scales of the pods' controllers (unmanaged pods do not
        count, as in the disruption controller). The stand-in has no
        workload controllers: a controller's scale is what `set_scale`
        registered, else the number of its pods that exist (terminating
        ones included)."""
        scales: dict[tuple, int] = {}
        for p in pods:
            ref = owner_controller(p)
            if ref is None:
                continue
            key = (p["metadata"]["namespace"], ref.get("kind"), ref.get("name"))
            if key in self.scales:
                scales[key] = self.scales[key]
            else:
                scales[key] = scales.get(key, 0) + 1
        return sum(scales.values())

    def pdb_status(self, pdb) -> dict:
        pods = self.pdb_pods(pdb)
        spec = pdb.get("spec") or {}
        expected = desired = 0
        if spec.get("maxUnavailable") is not None:
            expected = self.expected_scale(pods)
            desired = max(0, expected - scaled_value(spec["maxUnavailable"], expected))
        elif spec.get("minAvailable") is not None:
            ma = spec["minAvailable"]
            if isinstance(ma, int):
                desired = ma
                expected = len(pods)
            else:
                expected = self.expected_scale(pods)
                desired = scaled_value(ma, expected)
        now = time.time()
        key = (pdb["metadata"]["namespace"], pdb["metadata"]["name"])
        disrupted = {
            n: t
            for n, t in self.disrupted.get(key, {}).items()
            if t + 120 > now
            and (pdb["metadata"]["namespace"], n) in self.store["pods"]
            and not _get(self.store["pods"][(pdb["metadata"]["namespace"], n)], "metadata", "deletionTimestamp")
        }
        self.disrupted[key] = disrupted
        healthy = sum(
            1
            for p in pods
            if not _get(p, "metadata", "deletionTimestamp") and p["metadata"]["name"] not in disrupted and pod_ready(p)
        )
        allowed = healthy - desired
        if expected <= 0 or allowed <= 0:
            allowed = 0
        ts = rfc3339()
        cond = (
            {"type": "DisruptionAllowed", "status": "True", "reason": "SufficientPods", "message": ""}
            if allowed > 0
            else {"type": "DisruptionAllowed", "status": "False", "reason": "InsufficientPods", "message": ""}
        )
        cond["observedGeneration"] = pdb["metadata"].get("generation", 1)
        cond["lastTransitionTime"] = ts
        st = {
            "observedGeneration": pdb["metadata"].get("generation", 1),
            "disruptionsAllowed": allowed,
            "currentHealthy": healthy,
            "desiredHealthy": desired,
            "expectedPods": expected,
            "conditions": [cond],
        }
        if disrupted:
            st["disruptedPods"] = {n: rfc3339(t) for n, t in disrupted.items()}
        return st

    def evict(self, ns: str, name: str, body: dict, dry_run: bool):
        """pkg/registry/core/pod/storage/eviction.go, synchronously."""
        if not isinstance(body, dict) or body.get("kind") != "Eviction" or body.get("apiVersion") not in (
            "policy/v1",
            "policy/v1beta1",
        ):
            raise bad_request(f"not a Eviction object: {body.get('apiVersion') if isinstance(body, dict) else None}")
        if _get(body, "metadata", "name") != name:
            raise bad_request("name in URL does not match name in Eviction object")
        opts = body.get("deleteOptions") or {}
        if "dryRun" in opts and opts.get("dryRun"):
            dry_run = True
        grace = opts.get("gracePeriodSeconds")
        key = (ns, name)
        pod = self.store["pods"].get(key)
        if pod is None:
            raise not_found(PODS, name)
        phase = _get(pod, "status", "phase")
        success = {"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Success", "code": 201}
        if phase in ("Succeeded", "Failed", "Pending") or _get(pod, "metadata", "deletionTimestamp"):
            self.delete_pod(key, grace, opts.get("preconditions"), dry_run)
            return 201, success
        pdbs = [
            p
            for (pns, _), p in sorted(self.store["poddisruptionbudgets"].items())
            if pns == ns
            and (reqs := selector_from_label_selector(_get(p, "spec", "selector"))) is not None
            and label_match(reqs, _get(pod, "metadata", "labels"))
        ]
        if len(pdbs) > 1:
            return 500, {
                "kind": "Status",
                "apiVersion": "v1",
                "metadata": {},
                "status": "Failure",
                "message": "This pod has more than one PodDisruptionBudget, which the eviction subresource does not support.",
                "code": 500,
            }
        if pdbs:
            pdb = pdbs[0]
            st = self.pdb_status(pdb)
            always = _get(pdb, "spec", "unhealthyPodEvictionPolicy") == "AlwaysAllow"
            unready_ok = not pod_ready(pod) and (
                always or (st["currentHealthy"] >= st["desiredHealthy"] and st["desiredHealthy"] > 0)
            )
            if not unready_ok:
                if st["disruptionsAllowed"] <= 0:
                    raise ApiError(
                        429,
                        "TooManyRequests",
                        "Cannot evict pod as it would violate the pod's disruption budget.",
                        {
                            "causes": [
                                {
                                    "reason": "DisruptionBudget",
                                    "message": f"The disruption budget {pdb['metadata']['name']} needs "
                                    f"{st['desiredHealthy']} healthy pods and has {st['currentHealthy']} currently",
                                }
                            ]
                        },
                    )
                if not dry_run:
                    pkey = (ns, pdb["metadata"]["name"])
                    self.disrupted.setdefault(pkey, {})[name] = time.time()
        if not dry_run:
            # PodDisruptionConditions: the pod learns why it goes.
            conds = [c for c in _get(pod, "status", "conditions", default=[]) or [] if c.get("type") != "DisruptionTarget"]
            conds.append({"type": "DisruptionTarget", "status": "True", "lastProbeTime": None,
                          "lastTransitionTime": rfc3339(), "reason": "EvictionByEvictionAPI",
                          "message": "Eviction API: evicting"})
            pod.setdefault("status", {})["conditions"] = conds
            self.touch("pods", key, pod)
        self.delete_pod(key, grace, opts.get("preconditions"), dry_run)
        return 201, success

    # -- sync_nodes: nodes that follow moto's EC2 instances ---------------

    def sync_nodes_once(self):
        from moto.ec2.models import ec2_backends

        cfg = self.sync
        backend = ec2_backends[self.account][self.region]
        asg_ids = None
        if cfg.get("asg"):
            from moto.autoscaling.models import autoscaling_backends

            group = autoscaling_backends[self.account][self.region].autoscaling_groups.get(cfg["asg"])
            asg_ids = {s.instance.id for s in group.instance_states} if group else set()
        never = set(cfg.get("never_ready_images") or [])
        delay = float(cfg.get("register_delay_seconds") or 0)
        now = time.time()
        seen = set()
        for inst in backend.all_instances():
            tags = {(t.get("key") or t.get("Key")): (t.get("value") or t.get("Value")) for t in inst.get_tags()}
            mine = (
                inst.id in asg_ids
                if asg_ids is not None
                else (tags.get("eks:cluster-name") == self.name or tags.get(f"kubernetes.io/cluster/{self.name}") == "owned")
            )
            if not mine and inst.id not in self.synced_instances:
                continue
            seen.add(inst.id)
            state = inst.state
            node_name = self.synced_instances.get(inst.id)
            node_key = ("", node_name) if node_name else None
            if state == "terminated":
                if node_key and node_key in self.store["nodes"]:
                    self.delete_node(node_name)  # the cloud node-lifecycle controller
                continue
            if state != "running":
                node = self.store["nodes"].get(node_key) if node_key else None
                if node is not None and _get(node, "status", "conditions", default=[{}])[-1].get("status") != "Unknown":
                    node["status"]["conditions"] = node_conditions(None, rfc3339())
                    self.touch("nodes", node_key, node)
                continue
            if node_name is None:
                launched = getattr(inst, "launch_time", None)
                if delay and launched:
                    try:
                        lt = _dt.datetime.fromisoformat(str(launched).replace("Z", "+00:00")).timestamp()
                    except ValueError:
                        lt = now
                    first = self.sync.setdefault("_first_seen", {}).setdefault(inst.id, now)
                    if now < max(lt, first) + delay:
                        continue
                ip = getattr(inst, "private_ip", None)
                # EC2's private DNS name, which EKS nodes use as their name.
                domain = "ec2.internal" if self.region == "us-east-1" else f"{self.region}.compute.internal"
                node_name = f"ip-{ip.replace('.', '-')}.{domain}" if ip else f"{inst.id}.{domain}"
                self.synced_instances[inst.id] = node_name
                ready = bool(cfg.get("ready", True)) and inst.image_id not in never
                arch = "arm64" if getattr(inst, "architecture", "x86_64") == "arm64" else "amd64"
                zone = inst.placement.zone if hasattr(inst.placement, "zone") else str(inst.placement)
                labels = {
                    "kubernetes.io/hostname": node_name,
                    "kubernetes.io/os": "linux",
                    "kubernetes.io/arch": arch,
                    "beta.kubernetes.io/os": "linux",
                    "beta.kubernetes.io/arch": arch,
                    "node.kubernetes.io/instance-type": inst.instance_type,
                    "beta.kubernetes.io/instance-type": inst.instance_type,
                    "topology.kubernetes.io/region": self.region,
                    "topology.kubernetes.io/zone": zone,
                    "failure-domain.beta.kubernetes.io/region": self.region,
                    "failure-domain.beta.kubernetes.io/zone": zone,
                }
                if tags.get("eks:nodegroup-name"):
                    labels["eks.amazonaws.com/nodegroup"] = tags["eks:nodegroup-name"]
                    labels["eks.amazonaws.com/nodegroup-image"] = inst.image_id
                labels.update(cfg.get("labels") or {})
                self.add_node(
                    node_name,
                    f"aws:///{zone}/{inst.id}",
                    ready=ready,
                    labels=labels,
                    ip=getattr(inst, "private_ip", None),
                    arch=arch,
                    image=inst.image_id,
                    kubelet_version=self.kubelet_version_for(inst.image_id, cfg),
                )
            else:
                node = self.store["nodes"].get(node_key)
                if node is None:
                    continue  # deleted through the API; the kubelet would re-register, we don't
                if inst.id in set(cfg.get("stalled_instances") or []):
                    # The kubelet stopped posting status: the node lifecycle controller
                    # marks Ready Unknown (NodeStatusUnknown), once.
                    if _get(node, "status", "conditions", default=[{}])[-1].get("status") != "Unknown":
                        node["status"]["conditions"] = node_conditions(None, rfc3339())
                        self.touch("nodes", node_key, node)
                    continue
                want = bool(cfg.get("ready", True)) and inst.image_id not in never
                if node_ready(node) != want:
                    node["status"]["conditions"] = node_conditions(want, rfc3339())
                    self.touch("nodes", node_key, node)

    def kubelet_version_for(self, image_id: str, cfg: dict) -> str:
        """The kubelet on a node comes with its AMI: `kubelet_versions`
        {ami: "1.30"} in sync_nodes, else the Kubernetes minor in the AMI's
        name (amazon-eks-node-1.30-v2024..., amazon-eks-node-al2023-x86_64-standard-1.30-v...),
        else the cluster's version."""
        mapping = cfg.get("kubelet_versions") or {}
        if image_id in mapping:
            return str(mapping[image_id])
        try:
            from moto.ec2.models import ec2_backends

            ami = ec2_backends[self.account][self.region].amis.get(image_id)
            m = re.search(r"-(1\.\d+)-v\d", (ami.name or "") if ami else "")
            if m:
                return m.group(1)
        except Exception:
            pass
        return self.eks_version()

    def add_node(self, name, provider_id, ready=True, labels=None, ip=None, arch="amd64", image=None, taints=None,
                 unschedulable=False, kubelet_version=None):
        ts = rfc3339()
        ver = str(kubelet_version or self.eks_version()).lstrip("v")
        node = {
            "metadata": {
                "name": name,
                "labels": dict(
                    {"kubernetes.io/hostname": name, "kubernetes.io/os": "linux", "kubernetes.io/arch": arch},
                    **(labels or {}),
                ),
                "annotations": {"node.alpha.kubernetes.io/ttl": "0", "volumes.kubernetes.io/controller-managed-attach-detach": "true"},
            },
            "spec": {"providerID": provider_id},
            "status": {
                "conditions": node_conditions(bool(ready), ts),
                "addresses": [a for a in [
                    {"type": "InternalIP", "address": ip} if ip else None,
                    {"type": "Hostname", "address": name},
                    {"type": "InternalDNS", "address": name},
                ] if a],
                "nodeInfo": {
                    "kubeletVersion": f"v{ver}.0-eks-fakecloud",
                    "kubeProxyVersion": f"v{ver}.0-eks-fakecloud",
                    "operatingSystem": "linux",
                    "architecture": arch,
                    "osImage": "Amazon Linux 2023",
                    "containerRuntimeVersion": "containerd://1.7.0",
                    "kernelVersion": "6.1.0",
                    "machineID": uuid.uuid4().hex,
                    "systemUUID": str(uuid.uuid4()),
                    "bootID": str(uuid.uuid4()),
                },
                "capacity": {"cpu": "2", "memory": "8Gi", "pods": "29"},
                "allocatable": {"cpu": "1930m", "memory": "7Gi", "pods": "29"},
                "daemonEndpoints": {"kubeletEndpoint": {"Port": 10250}},
            },
        }
        if image:
            node["metadata"]["annotations"]["fakecloud/image-id"] = image
        if taints:
            node["spec"]["taints"] = taints
        if unschedulable:
            node["spec"]["unschedulable"] = True
        if ("", name) in self.store["nodes"]:
            raise already_exists(NODES, name)
        self.stamp_new(NODES, node, "")
        self.store["nodes"][("", name)] = node
        return node

    def delete_node(self, name):
        node = self.store["nodes"].pop(("", name), None)
        if node is None:
            raise not_found(NODES, name)
        self.next_rv()
        # PodGC: pods bound to a node that no longer exists are force-deleted.
        for key, pod in list(self.store["pods"].items()):
            if _get(pod, "spec", "nodeName") == name:
                self.store["pods"].pop(key, None)
                self.terminating.pop(key, None)
        return node


def check_preconditions(res: Resource, obj: dict, pre: dict | None):
    if not pre:
        return
    name = obj["metadata"]["name"]
    if pre.get("uid") and pre["uid"] != obj["metadata"].get("uid"):
        raise conflict(
            res, name, f"Precondition failed: UID in precondition: {pre['uid']}, UID in object meta: {obj['metadata'].get('uid')}"
        )
    if pre.get("resourceVersion") and pre["resourceVersion"] != obj["metadata"].get("resourceVersion"):
        raise conflict(
            res,
            name,
            f"Precondition failed: ResourceVersion in precondition: {pre['resourceVersion']}, "
            f"ResourceVersion in object meta: {obj['metadata'].get('resourceVersion')}",
        )


# --------------------------------------------------------------------------
# events: one store, two API versions
# --------------------------------------------------------------------------


def event_from_v1(ev: dict) -> dict:
    """events.k8s.io/v1 Event -> core/v1 Event (the storage form)."""
    out = {k: v for k, v in ev.items() if k not in ("regarding", "note", "reportingController", "deprecatedSource",
                                                    "deprecatedFirstTimestamp", "deprecatedLastTimestamp", "deprecatedCount")}
    if "regarding" in ev:
        out["involvedObject"] = ev["regarding"]
    if "note" in ev:
        out["message"] = ev["note"]
    if "reportingController" in ev:
        out["reportingComponent"] = ev["reportingController"]
    if "deprecatedSource" in ev:
        out["source"] = ev["deprecatedSource"]
    if "deprecatedFirstTimestamp" in ev:
        out["firstTimestamp"] = ev["deprecatedFirstTimestamp"]
    if "deprecatedLastTimestamp" in ev:
        out["lastTimestamp"] = ev["deprecatedLastTimestamp"]
    if "deprecatedCount" in ev:
        out["count"] = ev["deprecatedCount"]
    return out


def event_to_v1(ev: dict) -> dict:
    out = {k: v for k, v in ev.items() if k not in ("involvedObject", "message", "reportingComponent", "source",
                                                    "firstTimestamp", "lastTimestamp", "count")}
    out["kind"] = "Event"
    out["apiVersion"] = "events.k8s.io/v1"
    if "involvedObject" in ev:
        out["regarding"] = ev["involvedObject"]
    if ev.get("message"):
        out["note"] = ev["message"]
    if ev.get("reportingComponent"):
        out["reportingController"] = ev["reportingComponent"]
    if ev.get("source"):
        out["deprecatedSource"] = ev["source"]
    if ev.get("firstTimestamp"):
        out["deprecatedFirstTimestamp"] = ev["firstTimestamp"]
    if ev.get("lastTimestamp"):
        out["deprecatedLastTimestamp"] = ev["lastTimestamp"]
    if ev.get("count"):
        out["deprecatedCount"] = ev["count"]
    return out



QUALIFIED_NAME = re.compile(r"^([a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*/)?[A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?$")


def validate_event(res: Resource, ev: dict, ns: str):
    """pkg/apis/core/validation/events.go ValidateEventCreate: legacy checks
    always, strict ones for events.k8s.io/v1. `ev` is in core/v1 form."""
    name = _get(ev, "metadata", "name") or ""
    causes = []
    inv = ev.get("involvedObject") or {}
    inv_ns = inv.get("namespace") or ""
    bad_ns = ("involvedObject.namespace", "Invalid value", f'"{inv_ns}": does not match event.namespace')
    if not ev.get("eventTime"):
        if inv_ns == "":
            if ns not in ("", "default"):
                causes.append(bad_ns)
        elif ns != inv_ns:
            causes.append(bad_ns)
    else:
        if inv_ns == "" and ns not in ("default", "kube-system"):
            causes.append(bad_ns)
        rc = ev.get("reportingComponent") or ""
        if not rc:
            causes.append(("reportingController", "Required value", ""))
        elif len(rc) > 316 or not QUALIFIED_NAME.match(rc):
            causes.append(("reportingController", "Invalid value", f'"{rc}": must be a qualified name'))
        ri = ev.get("reportingInstance") or ""
        if not ri:
            causes.append(("reportingInstance", "Required value", ""))
        elif len(ri) > 128:
            causes.append(("reportingInstance", "Invalid value", '"": can have at most 128 characters'))
        for fld in ("action", "reason"):
            v = ev.get(fld) or ""
            if not v:
                causes.append((fld, "Required value", ""))
            elif len(v) > 128:
                causes.append((fld, "Invalid value", '"": can have at most 128 characters'))
        if len(ev.get("message") or "") > 1024:
            causes.append(("message", "Invalid value", '"": can have at most 1024 characters'))
    if res is EVENTS_V1:
        if not ev.get("eventTime"):
            causes.append(("eventTime", "Required value", ""))
        if ev.get("type") not in ("Normal", "Warning"):
            causes.append(("type", "Invalid value", f'"": has invalid value: {ev.get("type") or ""}'))
        for fld in ("firstTimestamp", "lastTimestamp", "count"):
            if ev.get(fld):
                causes.append((fld, "Invalid value", '"": needs to be unset'))
        if (ev.get("source") or {}).get("component") or (ev.get("source") or {}).get("host"):
            causes.append(("source", "Invalid value", '"": needs to be unset'))
        series = ev.get("series")
        if series is not None:
            if int(series.get("count") or 0) < 2:
                causes.append(("series.count", "Invalid value", '"": should be at least 2'))
            if not series.get("lastObservedTime"):
                causes.append(("series.lastObservedTime", "Required value", ""))
    if causes:
        raise invalid(res, name, causes)


def validate_path_segment_name(res: Resource, name: str):
    """RBAC object names are path segments (`path.ValidatePathSegmentName`), so
    `system:node-proxier` is a valid ClusterRole name."""
    if name in (".", ".."):
        raise invalid(res, name, [("metadata.name", "Invalid value", f'"{name}": may not be \'{name}\'')])
    for bad in ("/", "%"):
        if bad in name:
            raise invalid(res, name, [("metadata.name", "Invalid value", f'"{name}": may not contain \'{bad}\'')])


RBAC_SUBJECT_KINDS = ("ServiceAccount", "User", "Group")


def validate_rbac(res: Resource, obj: dict, name: str, old: dict | None = None):
    """`pkg/apis/rbac/validation`: ValidatePolicyRule for each ClusterRole rule
    (cluster scope: nonResourceURLs allowed, not mixed with resources); for a
    ClusterRoleBinding the roleRef (ClusterRole of rbac.authorization.k8s.io,
    named, immutable on update) and each subject. A Role's rules as a
    ClusterRole's, without nonResourceURLs (namespace scope); a RoleBinding's
    roleRef may also name a Role (of its own namespace)."""
    causes: list[tuple[str, str, str]] = []
    if res is ROLES:
        for i, rule in enumerate(obj.get("rules") or []):
            if isinstance(rule, dict) and rule.get("nonResourceURLs"):
                causes.append((f"rules[{i}].nonResourceURLs", "Invalid value",
                               f"{json.dumps(rule['nonResourceURLs'])}: namespaced rules cannot apply to non-resource URLs"))
    if res in (CLUSTERROLES, ROLES):
        rules = obj.get("rules") or []
        if not isinstance(rules, list):
            raise bad_request("rules must be a list")
        for i, rule in enumerate(rules):
            path = f"rules[{i}]"
            if not isinstance(rule, dict):
                raise bad_request(f"{path} must be an object")
            if not rule.get("verbs"):
                causes.append((f"{path}.verbs", "Required value", "verbs must contain at least one value"))
            if rule.get("nonResourceURLs"):
                if rule.get("apiGroups") or rule.get("resources"):
                    causes.append((f"{path}.nonResourceURLs", "Invalid value",
                                   f"{json.dumps(rule['nonResourceURLs'])}: rules cannot apply to both regular "
                                   "resources and non-resource URLs"))
                continue
            if not rule.get("apiGroups"):
                causes.append((f"{path}.apiGroups", "Required value",
                               "resource rules must supply at least one api group"))
            if not rule.get("resources"):
                causes.append((f"{path}.resources", "Required value",
                               "resource rules must supply at least one resource"))
    else:
        ref = obj.get("roleRef") or {}
        if ref.get("apiGroup") != RBAC_GROUP:
            causes.append(("roleRef.apiGroup", "Unsupported value",
                           f'"{ref.get("apiGroup") or ""}": supported values: "{RBAC_GROUP}"'))
        kinds = ("ClusterRole", "Role") if res is ROLEBINDINGS else ("ClusterRole",)
        if ref.get("kind") not in kinds:
            causes.append(("roleRef.kind", "Unsupported value",
                           f'"{ref.get("kind") or ""}": supported values: ' + ", ".join(f'"{k}"' for k in kinds)))
        if not ref.get("name"):
            causes.append(("roleRef.name", "Required value", ""))
        for i, subject in enumerate(obj.get("subjects") or []):
            path = f"subjects[{i}]"
            kind = subject.get("kind")
            if not subject.get("name"):
                causes.append((f"{path}.name", "Required value", ""))
            if kind == "ServiceAccount":
                if subject.get("apiGroup"):
                    causes.append((f"{path}.apiGroup", "Unsupported value",
                                   f'"{subject["apiGroup"]}": supported values: ""'))
                if not subject.get("namespace"):
                    causes.append((f"{path}.namespace", "Required value", ""))
            elif kind in ("User", "Group"):
                if subject.get("apiGroup") != RBAC_GROUP:
                    causes.append((f"{path}.apiGroup", "Unsupported value",
                                   f'"{subject.get("apiGroup") or ""}": supported values: "{RBAC_GROUP}"'))
            else:
                causes.append((f"{path}.kind", "Unsupported value",
                               f'"{kind or ""}": supported values: "Group", "ServiceAccount", "User"'))
        if old is not None and old.get("roleRef") != obj.get("roleRef"):
            causes.append(("roleRef", "Invalid value", f"{json.dumps(obj.get('roleRef'))}: cannot change roleRef"))
    if causes:
        raise invalid(res, name, causes)


# --------------------------------------------------------------------------
# HTTP
# --------------------------------------------------------------------------

ROUTES = [
    (re.compile(r"^/api/v1/nodes$"), NODES, "collection", None),
    (re.compile(r"^/api/v1/nodes/(?P<name>[^/]+)$"), NODES, "item", None),
    (re.compile(r"^/api/v1/nodes/(?P<name>[^/]+)/status$"), NODES, "item", "status"),
    (re.compile(r"^/api/v1/pods$"), PODS, "collection", None),
    (re.compile(r"^/api/v1/namespaces/(?P<ns>[^/]+)/pods$"), PODS, "collection", None),
    (re.compile(r"^/api/v1/namespaces/(?P<ns>[^/]+)/pods/(?P<name>[^/]+)$"), PODS, "item", None),
    (re.compile(r"^/api/v1/namespaces/(?P<ns>[^/]+)/pods/(?P<name>[^/]+)/status$"), PODS, "item", "status"),
    (re.compile(r"^/api/v1/namespaces/(?P<ns>[^/]+)/pods/(?P<name>[^/]+)/eviction$"), PODS, "item", "eviction"),
    (re.compile(r"^/apis/policy/v1/poddisruptionbudgets$"), PDBS, "collection", None),
    (re.compile(r"^/apis/policy/v1/namespaces/(?P<ns>[^/]+)/poddisruptionbudgets$"), PDBS, "collection", None),
    (re.compile(r"^/apis/policy/v1/namespaces/(?P<ns>[^/]+)/poddisruptionbudgets/(?P<name>[^/]+)$"), PDBS, "item", None),
    (re.compile(r"^/api/v1/events$"), EVENTS, "collection", None),
    (re.compile(r"^/api/v1/namespaces/(?P<ns>[^/]+)/events$"), EVENTS, "collection", None),
    (re.compile(r"^/api/v1/namespaces/(?P<ns>[^/]+)/events/(?P<name>[^/]+)$"), EVENTS, "item", None),
    (re.compile(r"^/apis/events\.k8s\.io/v1/events$"), EVENTS_V1, "collection", None),
    (re.compile(r"^/apis/events\.k8s\.io/v1/namespaces/(?P<ns>[^/]+)/events$"), EVENTS_V1, "collection", None),
    (re.compile(r"^/apis/events\.k8s\.io/v1/namespaces/(?P<ns>[^/]+)/events/(?P<name>[^/]+)$"), EVENTS_V1, "item", None),
    (re.compile(r"^/apis/rbac\.authorization\.k8s\.io/v1/clusterroles$"), CLUSTERROLES, "collection", None),
    (re.compile(r"^/apis/rbac\.authorization\.k8s\.io/v1/clusterroles/(?P<name>[^/]+)$"), CLUSTERROLES, "item", None),
    (re.compile(r"^/apis/rbac\.authorization\.k8s\.io/v1/clusterrolebindings$"), CLUSTERROLEBINDINGS, "collection",
     None),
    (re.compile(r"^/apis/rbac\.authorization\.k8s\.io/v1/clusterrolebindings/(?P<name>[^/]+)$"), CLUSTERROLEBINDINGS,
     "item", None),
    (re.compile(r"^/apis/rbac\.authorization\.k8s\.io/v1/roles$"), ROLES, "collection", None),
    (re.compile(r"^/apis/rbac\.authorization\.k8s\.io/v1/namespaces/(?P<ns>[^/]+)/roles$"), ROLES, "collection", None),
    (re.compile(r"^/apis/rbac\.authorization\.k8s\.io/v1/namespaces/(?P<ns>[^/]+)/roles/(?P<name>[^/]+)$"), ROLES,
     "item", None),
    (re.compile(r"^/apis/rbac\.authorization\.k8s\.io/v1/rolebindings$"), ROLEBINDINGS, "collection", None),
    (re.compile(r"^/apis/rbac\.authorization\.k8s\.io/v1/namespaces/(?P<ns>[^/]+)/rolebindings$"), ROLEBINDINGS,
     "collection", None),
    (re.compile(r"^/apis/rbac\.authorization\.k8s\.io/v1/namespaces/(?P<ns>[^/]+)/rolebindings/(?P<name>[^/]+)$"),
     ROLEBINDINGS, "item", None),
]

PATCH_TYPES = {
    "application/merge-patch+json": "merge",
    "application/strategic-merge-patch+json": "strategic",
    "application/json-patch+json": "json",
}


def parse_query(q: str) -> dict:
    out = {}
    for pair in q.split("&") if q else []:
        k, _, v = pair.partition("=")
        out[unquote(k.replace("+", " "))] = unquote(v.replace("+", " "))
    return out


class _Dropped(Exception):
    """A fault-injected connection reset (faults.py): no answer at all."""


class KubeHandler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server_version = "fakecloud-kube-apiserver"
    cluster: KubeCluster = None  # set per cluster
    timeout = 600  # idle keep-alive connections are dropped after this

    def log_message(self, format, *args):  # noqa: A002
        pass

    def handle(self):
        try:
            self.connection.do_handshake()
        except (ssl.SSLError, OSError):
            return  # the client refused our certificate, or went away
        super().handle()

    def do_GET(self):
        self.dispatch("GET")

    def do_POST(self):
        self.dispatch("POST")

    def do_PUT(self):
        self.dispatch("PUT")

    def do_PATCH(self):
        self.dispatch("PATCH")

    def do_DELETE(self):
        self.dispatch("DELETE")

    def send_json(self, status: int, body):
        text = isinstance(body, str)
        data = body.encode() if text else json.dumps(body).encode()
        self.send_response(status)
        self.send_header("Content-Type", "text/plain; charset=utf-8" if text else "application/json")
        self.send_header("Cache-Control", "no-cache, private")
        if status == 429:
            retry = _get(body, "details", "retryAfterSeconds")
            if retry:
                self.send_header("Retry-After", str(retry))
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def dispatch(self, method: str):
        cluster = self.cluster
        started = time.time()
        raw_path, _, raw_query = self.path.partition("?")
        length = int(self.headers.get("Content-Length") or 0)
        body_bytes = self.rfile.read(length) if length > 0 else b""
        entry = {"method": method, "path": raw_path, "query": raw_query, "time": rfc3339(started),
                 "ts": started, "user_agent": self.headers.get("User-Agent")}
        ctype = (self.headers.get("Content-Type") or "").split(";")[0].strip().lower()
        if body_bytes and method in ("POST", "PUT", "PATCH", "DELETE"):
            try:
                entry["body"] = json.loads(body_bytes)
            except ValueError:
                entry["body"] = body_bytes.decode("utf-8", "replace")
            entry["content_type"] = ctype
        authz = self.headers.get("Authorization")
        reason = verify_token(authz, cluster.name, account=cluster.account) if authz else "no Authorization header"
        anonymous = not authz and method == "GET" and raw_path.rstrip("/") in PUBLIC_PATHS
        if reason is not None and not anonymous:
            entry["auth_error"] = reason
            if authz:
                # Credentials that fail authentication: 401.
                status, body = 401, ApiError(401, "Unauthorized", "Unauthorized").body()
            else:
                # No credentials: EKS runs with anonymous auth on, so the
                # request is system:anonymous and RBAC forbids it.
                status, body = 403, forbidden_anonymous(method, raw_path).body()
        elif (fault := faults.kube_fault(cluster.name, method, raw_path, raw_query)) and fault[1] is not None:
            entry["fault"] = fault[0]
            status, body = fault[1], fault[2]
        else:
            try:
                if fault:  # reset: drop the connection before carrying the call out
                    entry["fault"] = fault[0]
                    if fault[0] == "reset":
                        raise _Dropped()
                cluster.tick()
                with cluster.lock:
                    status, body = route(cluster, method, raw_path, parse_query(raw_query), ctype, body_bytes)
            except _Dropped:
                status, body = 0, None
            except ApiError as e:
                status, body = e.code, e.body()
                if getattr(e, "debug", None):
                    entry["error_detail"] = e.debug
            except Exception as e:  # a bug in the stand-in: answer like the apiserver would
                import traceback

                traceback.print_exc()
                status, body = 500, ApiError(500, "InternalError", f"Internal error occurred: {e}").body()
        entry["status"] = status
        if entry.get("fault") in ("reset", "reset_after"):
            cluster.log(entry)
            self.close_connection = True
            faults.drop(self.connection)
            return
        cluster.log(entry)
        if isinstance(body, WatchRequest):
            self.stream_watch(body)
        else:
            self.send_json(status, body)

    def stream_watch(self, w: "WatchRequest"):
        """A watch as the apiserver streams it: chunked JSON lines of
        {"type": ADDED|MODIFIED|DELETED, "object": ...}, from the stand-in's
        log of every write. Objects that start/stop matching the selectors
        are ADDED/DELETED, as with the real watch cache. A resourceVersion
        replays the writes after it (no 410 Gone: the log is never
        compacted); none or "0" starts with ADDED for every current object."""
        cluster = self.cluster
        try:
            timeout = float(w.query.get("timeoutSeconds") or 1800)
        except ValueError:
            timeout = 1800.0
        deadline = time.time() + min(timeout, 3600)
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Cache-Control", "no-cache, private")
        self.send_header("Transfer-Encoding", "chunked")
        self.end_headers()
        self.close_connection = True

        def send(typ, obj):
            line = json.dumps({"type": typ, "object": obj}).encode() + b"\n"
            self.wfile.write(f"{len(line):x}\r\n".encode() + line + b"\r\n")
            self.wfile.flush()

        def selected(key, obj) -> bool:
            if w.res.namespaced and w.ns is not None and key[0] != w.ns:
                return False
            return label_match(w.lsel, _get(obj, "metadata", "labels")) and field_match(w.fsel, w.res, obj)

        since = w.query.get("resourceVersion") or ""
        try:
            with cluster.lock:
                out = []
                if since.isdigit() and since != "0":
                    start_rv = int(since)
                    # What matched as of `since`: replay the log up to it.
                    matched = set()
                    pos = 0
                    for pos, (rv, plural, key, typ, obj) in enumerate(cluster.changes):
                        if rv > start_rv:
                            break
                        if plural == w.res.plural:
                            if typ != "DELETED" and selected(key, obj):
                                matched.add(key)
                            else:
                                matched.discard(key)
                    else:
                        pos = len(cluster.changes)
                else:
                    matched = set()
                    for key, obj in sorted(cluster.store[w.res.plural].items()):
                        if selected(key, obj):
                            matched.add(key)
                            out.append(("ADDED", cluster.present(w.res, obj)))
                    pos = len(cluster.changes)
            for typ, obj in out:
                send(typ, obj)
            while time.time() < deadline and not cluster.stopped:
                out = []
                with cluster.lock:
                    if pos >= len(cluster.changes):
                        cluster.changed.wait(timeout=min(0.5, max(0.0, deadline - time.time())))
                    new = cluster.changes[pos:]
                    pos = len(cluster.changes)
                    for rv, plural, key, typ, obj in new:
                        if plural != w.res.plural:
                            continue
                        was = key in matched
                        now = typ != "DELETED" and selected(key, obj)
                        if now:
                            matched.add(key)
                            out.append(("MODIFIED" if was else "ADDED", cluster.present(w.res, obj)))
                        elif was:
                            matched.discard(key)
                            out.append(("DELETED", cluster.present(w.res, obj)))
                for typ, obj in out:
                    send(typ, obj)
            self.wfile.write(b"0\r\n\r\n")
            self.wfile.flush()
        except (BrokenPipeError, ConnectionResetError, ssl.SSLError, OSError):
            pass


# What system:anonymous may GET (the system:public-info-viewer role).
PUBLIC_PATHS = {"/version", "/healthz", "/livez", "/readyz"}


def forbidden_anonymous(method: str, path: str) -> ApiError:
    path = path.rstrip("/")
    for rx, res, shape, sub in ROUTES:
        m = rx.match(path)
        if not m:
            continue
        ns = m.groupdict().get("ns")
        name = m.groupdict().get("name")
        verb = {"GET": "list" if shape == "collection" else "get", "POST": "create", "PUT": "update",
                "PATCH": "patch", "DELETE": "delete"}.get(method, method.lower())
        resource = res.plural + (f"/{sub}" if sub else "")
        scope = f'in the namespace "{ns}"' if ns else "at the cluster scope"
        subject = f'{qualified(res)} "{name}"' if name else qualified(res)
        details = {"kind": res.plural}
        if name:
            details = {"name": name, "kind": res.plural}
        if res.group:
            details["group"] = res.group
        return ApiError(
            403,
            "Forbidden",
            f'{subject} is forbidden: User "system:anonymous" cannot {verb} resource "{resource}" '
            f'in API group "{res.group}" {scope}',
            details,
        )
    return ApiError(
        403, "Forbidden", f'forbidden: User "system:anonymous" cannot {method.lower()} path "{path or "/"}"', {}
    )


def decode_body(body_bytes: bytes):
    if not body_bytes:
        raise bad_request("the body of the request was empty")
    try:
        return json.loads(body_bytes)
    except ValueError as e:
        raise bad_request(f"couldn't get version/kind; json parse error: {e}")


def dry_run_of(query: dict) -> bool:
    return query.get("dryRun") == "All"


def route(cluster: KubeCluster, method: str, path: str, query: dict, ctype: str, body_bytes: bytes):
    path = path.rstrip("/") or "/"
    if path == "/version" and method == "GET":
        ver = cluster.eks_version()
        major, _, minor = ver.partition(".")
        return 200, {
            "major": major, "minor": minor, "gitVersion": f"v{ver}.0-eks-fakecloud", "gitCommit": "0" * 40,
            "gitTreeState": "clean", "buildDate": "2024-01-01T00:00:00Z", "goVersion": "go1.22.0",
            "compiler": "gc", "platform": "linux/amd64",
        }
    if path in ("/healthz", "/livez", "/readyz") and method == "GET":
        return 200, "ok"
    if path == "/api" and method == "GET":
        return 200, {"kind": "APIVersions", "versions": ["v1"],
                     "serverAddressByClientCIDRs": [{"clientCIDR": "0.0.0.0/0", "serverAddress": "127.0.0.1:443"}]}
    for rx, res, shape, sub in ROUTES:
        m = rx.match(path)
        if not m:
            continue
        ns = m.groupdict().get("ns")
        name = m.groupdict().get("name")
        if shape == "collection":
            if method == "GET":
                return list_objects(cluster, res, ns, query)
            if method == "POST" and (ns is not None or not res.namespaced):
                return create_object(cluster, res, ns or "", decode_body(body_bytes), query)
        elif sub == "eviction":
            if method == "POST":
                body = decode_body(body_bytes)
                return cluster.evict(ns, name, body, dry_run_of(query))
        else:
            key = (ns or "", name)
            if method == "GET":
                obj = cluster.store[res.plural].get(key)
                if obj is None:
                    raise not_found(res, name)
                return 200, cluster.present(res, obj)
            if method == "PUT":
                return update_object(cluster, res, key, decode_body(body_bytes), sub, query)
            if method == "PATCH":
                return patch_object(cluster, res, key, ctype, body_bytes, sub, query)
            if method == "DELETE" and sub is None:
                return delete_object(cluster, res, key, body_bytes, query)
        raise ApiError(405, "MethodNotAllowed", "the server does not allow this method on the requested resource",
                       {})
    raise ApiError(404, "NotFound", "the server could not find the requested resource", {})


class WatchRequest:
    def __init__(self, res, ns, fsel, lsel, query):
        self.res, self.ns, self.fsel, self.lsel, self.query = res, ns, fsel, lsel, query


def matching(cluster, res, ns, fsel, lsel) -> dict:
    out = {}
    for key, obj in cluster.store[res.plural].items():
        if res.namespaced and ns is not None and key[0] != ns:
            continue
        if label_match(lsel, _get(obj, "metadata", "labels")) and field_match(fsel, res, obj):
            out[key] = obj
    return out


_ATOMS = (str, int, float, bool, type(None))


def _json_copy(value):
    """copy.deepcopy of a JSON document (dicts, lists, strings, numbers, booleans, None), in a
    fraction of its time (a list page of 500 Nodes copies 500 documents); anything else in it
    is copied by copy.deepcopy."""
    t = type(value)
    if t is dict:
        return {k: v if type(v) in _ATOMS else _json_copy(v) for k, v in value.items()}
    if t is list:
        return [v if type(v) in _ATOMS else _json_copy(v) for v in value]
    if t in _ATOMS:
        return value
    return copy.deepcopy(value)


def list_objects(cluster, res, ns, query):
    fsel = parse_field_selector(query.get("fieldSelector", ""), res)
    lsel = parse_label_selector(query.get("labelSelector", ""))
    if query.get("watch") in ("true", "1"):
        return 200, WatchRequest(res, ns, fsel, lsel, query)
    items = []
    for (ons, oname), obj in sorted(cluster.store[res.plural].items()):
        if res.namespaced and ns is not None and ons != ns:
            continue
        if not label_match(lsel, _get(obj, "metadata", "labels")):
            continue
        if not field_match(fsel, res, obj):
            continue
        items.append(obj)
    meta = {"resourceVersion": str(cluster.rv)}
    start = 0
    if query.get("continue"):
        try:
            start = int(json.loads(base64.b64decode(query["continue"]))["start"])
        except Exception:
            raise ApiError(410, "Expired", "The provided continue parameter is too old to display a consistent list result.")
    limit = int(query["limit"]) if query.get("limit", "").isdigit() and int(query["limit"]) > 0 else None
    items = items[start:]
    if limit is not None and len(items) > limit:
        meta["continue"] = base64.b64encode(json.dumps({"start": start + limit, "rv": cluster.rv}).encode()).decode()
        meta["remainingItemCount"] = len(items) - limit
        items = items[:limit]
    return 200, {
        "kind": f"{res.kind}List",
        "apiVersion": res.api_version,
        "metadata": meta,
        "items": [cluster.present(res, o, in_list=True) for o in items],
    }


def check_kind(res: Resource, obj: dict):
    if not isinstance(obj, dict):
        raise bad_request("the body must be a JSON object")
    kind = obj.get("kind")
    api = obj.get("apiVersion")
    if kind is not None and kind != res.kind or api is not None and api != res.api_version:
        raise bad_request(
            f"the API version in the data ({api}) does not match the expected API version ({res.api_version})"
            if api != res.api_version
            else f"the kind in the data ({kind}) does not match the expected kind ({res.kind})"
        )


def create_object(cluster, res, ns, obj, query):
    check_kind(res, obj)
    meta = obj.setdefault("metadata", {})
    if res.namespaced:
        if meta.get("namespace") and meta["namespace"] != ns:
            raise bad_request("the namespace of the provided object does not match the namespace sent on the request")
    name = meta.get("name")
    if not name and meta.get("generateName"):
        name = meta["generateName"] + rand_suffix()
        meta["name"] = name
    if not name:
        raise invalid(res, "", [("metadata.name", "Required value", "name or generateName is required")])
    if res in RBAC_RESOURCES:
        validate_path_segment_name(res, name)
    elif not re.fullmatch(r"[a-z0-9]([-a-z0-9.]*[a-z0-9])?", name) or len(name) > 253:
        raise invalid(res, name, [("metadata.name", "Invalid value", f'"{name}": a lowercase RFC 1123 subdomain must consist of lower case alphanumeric characters, \'-\' or \'.\', and must start and end with an alphanumeric character')])
    if res is EVENTS_V1:
        obj = event_from_v1(obj)
    key = (ns if res.namespaced else "", name)
    if key in cluster.store[res.plural]:
        raise already_exists(res, name)
    if res is EVENTS or res is EVENTS_V1:
        validate_event(res, obj, ns)
    if res in RBAC_RESOURCES:
        validate_rbac(res, obj, name)
    obj = copy.deepcopy(obj)
    if res is PODS:
        prepare_pod_for_create(cluster, obj)
    if res is PDBS:
        obj.pop("status", None)
    cluster.stamp_new(res, obj, ns)
    if dry_run_of(query):
        return 201, cluster.present(res, obj)
    cluster.store[res.plural][key] = obj
    return 201, cluster.present(res, obj)


def prepare_pod_for_create(cluster, pod):
    """The apiserver drops status on create (the kubelet reports it). The
    stand-in's kubelet starts a pod bound to a Ready node at once (Running,
    Ready); unbound pods stay Pending (there is no scheduler)."""
    spec = pod.setdefault("spec", {})
    spec.setdefault("terminationGracePeriodSeconds", 30)
    spec.setdefault("restartPolicy", "Always")
    spec.setdefault("dnsPolicy", "ClusterFirst")
    spec.setdefault("schedulerName", "default-scheduler")
    spec.setdefault("serviceAccountName", "default")
    spec.setdefault("enableServiceLinks", True)
    spec.setdefault("preemptionPolicy", "PreemptLowerPriority")
    spec.setdefault("priority", 0)
    spec.setdefault("securityContext", {})
    node = cluster.store["nodes"].get(("", spec.get("nodeName"))) if spec.get("nodeName") else None
    ts = rfc3339()
    if node is not None and node_ready(node):
        ip = next((a["address"] for a in _get(node, "status", "addresses", default=[]) if a.get("type") == "InternalIP"), None)
        pod["status"] = {"phase": "Running", "conditions": pod_conditions(True, ts), "startTime": ts, "qosClass": "BestEffort"}
        if ip:
            pod["status"]["hostIP"] = ip
    else:
        pod["status"] = {"phase": "Pending", "qosClass": "BestEffort"}


def strip_server_fields(res, old, new):
    meta = new.setdefault("metadata", {})
    for k in ("uid", "creationTimestamp", "deletionTimestamp", "deletionGracePeriodSeconds", "namespace", "name"):
        if k in old["metadata"]:
            meta[k] = old["metadata"][k]
        else:
            meta.pop(k, None)
    new["kind"] = res.kind
    new["apiVersion"] = res.api_version


def commit_update(cluster, res, key, old, new, sub, query, rv_required: bool):
    """Shared by PUT and PATCH: optimistic concurrency, status/spec split."""
    name = key[1]
    sent_rv = _get(new, "metadata", "resourceVersion")
    if sent_rv and sent_rv != old["metadata"]["resourceVersion"]:
        raise conflict(res, name, MODIFIED)
    if rv_required and not sent_rv and res is PDBS:
        raise invalid(res, name, [("metadata.resourceVersion", "Invalid value", '0x0: must be specified for an update')])
    if _get(new, "metadata", "name") not in (None, name):
        raise bad_request(f"the name of the object ({_get(new, 'metadata', 'name')}) does not match the name on the URL ({name})")
    strip_server_fields(res, old, new)
    if res is PODS or res is NODES or res is PDBS:
        if sub == "status":
            # status subresource: only status changes are taken
            keep = copy.deepcopy(old)
            keep["status"] = new.get("status", {})
            new = keep
        else:
            new["status"] = copy.deepcopy(old.get("status", {}))
    if res in RBAC_RESOURCES:
        validate_rbac(res, new, name, old)
    if res is PDBS and new.get("spec") != old.get("spec"):
        new["metadata"]["generation"] = old["metadata"].get("generation", 1) + 1
    if res is EVENTS_V1:
        new = event_from_v1(new)
    changed = {k: v for k, v in new.items() if k != "metadata"} != {k: v for k, v in old.items() if k != "metadata"} or \
        {k: v for k, v in new["metadata"].items() if k != "resourceVersion"} != \
        {k: v for k, v in old["metadata"].items() if k != "resourceVersion"}
    new["metadata"]["resourceVersion"] = old["metadata"]["resourceVersion"]
    if changed and not dry_run_of(query):
        # A no-op update keeps the resourceVersion and makes no watch event.
        new["metadata"]["resourceVersion"] = cluster.next_rv()
        cluster.store[res.plural][key] = new
    return 200, cluster.present(res, new)


def update_object(cluster, res, key, obj, sub, query):
    check_kind(res, obj)
    old = cluster.store[res.plural].get(key)
    if old is None:
        raise not_found(res, key[1])
    if res is EVENTS_V1:
        obj = event_from_v1(obj)
    return commit_update(cluster, res, key, old, copy.deepcopy(obj), sub, query, rv_required=True)


def patch_object(cluster, res, key, ctype, body_bytes, sub, query):
    kind = PATCH_TYPES.get(ctype)
    if kind is None:
        raise ApiError(
            415,
            "UnsupportedMediaType",
            f"the body of the request was in an unknown format - accepted media types include: "
            f"application/json-patch+json, application/merge-patch+json, application/apply-patch+yaml, "
            f"application/strategic-merge-patch+json",
        )
    old = cluster.store[res.plural].get(key)
    if old is None:
        raise not_found(res, key[1])
    patch = decode_body(body_bytes)
    current = cluster.present(res, old)
    if res is PDBS:
        current["status"] = old.get("status", {})
    try:
        if kind == "merge":
            if not isinstance(patch, dict):
                raise bad_request("merge patch must be a JSON object")
            new = merge_patch(current, patch)
        elif kind == "strategic":
            if not isinstance(patch, dict):
                raise bad_request("strategic merge patch must be a JSON object")
            new = strategic_merge_patch(current, patch)
        else:
            new = json_patch(current, patch)
    except JsonPatchError as e:
        # NewGenericServerResponse(422, ...): the jsonpatch error text is not
        # sent; it is kept in the request log as `error_detail`.
        err = ApiError(422, "Invalid", "the server rejected our request due to an error in our request", {})
        err.debug = str(e)
        raise err
    except ValueError as e:
        raise bad_request(str(e))
    if not isinstance(new, dict):
        raise bad_request("the patch produced something that is not an object")
    # A resourceVersion left untouched by the patch is no precondition.
    if _get(new, "metadata", "resourceVersion") == old["metadata"]["resourceVersion"]:
        new["metadata"].pop("resourceVersion", None)
    return commit_update(cluster, res, key, old, new, sub, query, rv_required=False)


def delete_object(cluster, res, key, body_bytes, query):
    opts = {}
    if body_bytes:
        try:
            opts = json.loads(body_bytes) or {}
        except ValueError:
            raise bad_request("invalid DeleteOptions body")
    grace = opts.get("gracePeriodSeconds")
    if "gracePeriodSeconds" in query:
        try:
            grace = int(query["gracePeriodSeconds"])
        except ValueError:
            raise bad_request("gracePeriodSeconds must be an integer")
    dry = dry_run_of(query) or bool(opts.get("dryRun"))
    pre = opts.get("preconditions")
    if res is PODS:
        return 200, cluster.present(PODS, cluster.delete_pod(key, grace, pre, dry))
    obj = cluster.store[res.plural].get(key)
    if obj is None:
        raise not_found(res, key[1])
    check_preconditions(res, obj, pre)
    if not dry:
        if res is NODES:
            cluster.delete_node(key[1])
        else:
            cluster.store[res.plural].pop(key, None)
            cluster.next_rv()
    return 200, {"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Success",
                 "details": dict(details_for(res, key[1]), uid=obj["metadata"]["uid"])}


# --------------------------------------------------------------------------
# lifecycle and control ops
# --------------------------------------------------------------------------


def _ticker():
    while not _STOP.wait(0.2):
        with _CLUSTERS_LOCK:
            clusters = list(CLUSTERS.values())
        for c in clusters:
            try:
                c.tick()
            except Exception:
                import traceback

                traceback.print_exc()


def _ensure_ticker():
    global _TICKER
    if _TICKER is None:
        _TICKER = threading.Thread(target=_ticker, name="kube-ticker", daemon=True)
        _TICKER.start()


def reset_all():
    with _CLUSTERS_LOCK:
        clusters = list(CLUSTERS.values())
        CLUSTERS.clear()
    for c in clusters:
        c.stop()


def shutdown():
    """Process exit: remove the certificates; the servers die with us."""
    _STOP.set()
    if _TMPDIR:
        shutil.rmtree(_TMPDIR, ignore_errors=True)


def register(op, ControlError):  # noqa: N803
    def region_of(args):
        return args.get("region") or DEFAULT_REGION

    def get_cluster(args) -> KubeCluster:
        key = (region_of(args), args.get("cluster") or "")
        with _CLUSTERS_LOCK:
            c = CLUSTERS.get(key)
        if c is None:
            raise ControlError(f"no Kubernetes stand-in for cluster {key[1]!r} in {key[0]} (create_kube first)")
        return c

    def api_call(fn):
        try:
            return fn()
        except ApiError as e:
            raise ControlError(f"{e.code} {e.reason}: {e.message}")

    @op("create_kube")
    def create_kube(args):
        """Start the stand-in for an EKS cluster; points the moto cluster's
        endpoint and certificateAuthority at it (the cluster is created in
        moto if missing, with `version` or 1.30)."""
        name = args["cluster"]
        region = region_of(args)
        account = str(args.get("account") or ACCOUNT_ID)
        key = (region, name)
        with _CLUSTERS_LOCK:
            existing = CLUSTERS.get(key)
        if existing is None:
            c = KubeCluster(name, region)
            c.account = account
            c.start()
            with _CLUSTERS_LOCK:
                CLUSTERS[key] = c
            _ensure_ticker()
        else:
            c = existing
        from moto.eks.models import Cluster, eks_backends

        backend = eks_backends[c.account][region]
        cl = backend.clusters.get(name)
        if cl is None:
            cl = Cluster(
                name=name,
                role_arn=f"arn:aws:iam::{c.account}:role/eks-cluster",
                resources_vpc_config={"subnetIds": [], "securityGroupIds": [], "endpointPublicAccess": True,
                                      "endpointPrivateAccess": False},
                account_id=c.account,
                region_name=region,
                aws_partition="aws",
                version=str(args.get("version") or "1.30"),
            )
            backend.clusters[name] = cl
            backend.cluster_count += 1
        cl.endpoint = c.endpoint
        cl.certificate_authority = {"data": c.ca_data}
        return {"endpoint": c.endpoint, "caFile": c.ca_file, "caData": c.ca_data, "cluster": name, "region": region}

    @op("kube_auth")
    def kube_auth(args):
        """Change the credentials tokens must be signed with."""
        if args.get("access_key"):
            AUTH["access_key"] = args["access_key"]
        if args.get("secret_key"):
            AUTH["secret_key"] = args["secret_key"]
        return dict(AUTH)

    @op("kube_token")
    def kube_token(args):
        """A valid bearer token for the cluster (independent test aid; the
        code under test should make its own)."""
        at = None
        if args.get("at"):
            from aws_fixtures import parse_rfc3339

            at = parse_rfc3339(args["at"])
        return {"token": make_token(args["cluster"], region_of(args), at=at,
                                    session_token=args.get("session_token"))}

    @op("add_node")
    def add_node(args):
        c = get_cluster(args)
        name = args["name"]
        provider_id = args.get("provider_id") or f"aws:///{region_of(args)}a/i-{secrets.token_hex(8)[:17]}"
        with c.lock:
            node = api_call(lambda: c.add_node(
                name, provider_id, ready=args.get("ready", True), labels=args.get("labels"), ip=args.get("ip"),
                arch=args.get("arch", "amd64"), taints=args.get("taints"), unschedulable=args.get("unschedulable", False),
                kubelet_version=args.get("kubelet_version"),
            ))
            return c.present(NODES, node)

    @op("set_node_ready")
    def set_node_ready(args):
        c = get_cluster(args)
        with c.lock:
            node = c.store["nodes"].get(("", args["name"]))
            if node is None:
                raise ControlError(f"no node {args['name']!r}")
            ready = args.get("ready", True)
            node["status"]["conditions"] = node_conditions(None if ready is None else bool(ready), rfc3339())
            c.touch("nodes", ("", args["name"]), node)
            return c.present(NODES, node)

    @op("delete_node")
    def delete_node(args):
        c = get_cluster(args)
        with c.lock:
            api_call(lambda: c.delete_node(args["name"]))
        return {}

    @op("add_pod")
    def add_pod(args):
        c = get_cluster(args)
        ns = args.get("namespace", "default")
        name = args["name"]
        node = args.get("node")
        labels = args.get("labels") or {}
        meta = {"name": name, "namespace": ns, "labels": labels}
        owner_kind = args.get("owner_kind")
        if owner_kind:
            owner_name = args.get("owner_name") or (
                name.rsplit("-", 1)[0] if owner_kind == "DaemonSet" and "-" in name else f"{name}-owner"
            )
            api = {"ReplicaSet": "apps/v1", "DaemonSet": "apps/v1", "StatefulSet": "apps/v1", "Job": "batch/v1",
                   "ReplicationController": "v1"}.get(owner_kind, "apps/v1")
            meta["ownerReferences"] = [{
                "apiVersion": api, "kind": owner_kind, "name": owner_name,
                "uid": str(uuid.uuid5(uuid.NAMESPACE_URL, f"{ns}/{owner_kind}/{owner_name}")),
                "controller": True, "blockOwnerDeletion": True,
            }]
        if args.get("mirror"):
            meta["annotations"] = {
                "kubernetes.io/config.mirror": hashlib.md5(name.encode()).hexdigest(),
                "kubernetes.io/config.source": "file",
                "kubernetes.io/config.hash": hashlib.md5(name.encode()).hexdigest(),
            }
            meta["ownerReferences"] = [{"apiVersion": "v1", "kind": "Node", "name": node or "",
                                        "uid": "", "controller": True}]
        if args.get("annotations"):
            meta.setdefault("annotations", {}).update(args["annotations"])
        waiting = args.get("waiting_reason")
        phase = args.get("phase") or (
            ("Running" if waiting == "CrashLoopBackOff" else "Pending") if waiting and node
            else ("Running" if node else "Pending"))
        ready = bool(args.get("ready", phase == "Running" and not waiting))
        ts = rfc3339()
        pod = {
            "metadata": meta,
            "spec": {
                "containers": [{"name": "app", "image": args.get("image", "public.ecr.aws/docker/library/busybox:latest")}],
                "terminationGracePeriodSeconds": int(args.get("grace_seconds", 30)),
                "restartPolicy": "Always",
                "schedulerName": "default-scheduler",
                "serviceAccountName": "default",
                "priority": 0,
            },
            "status": {"phase": phase, "qosClass": "BestEffort"},
        }
        if node:
            pod["spec"]["nodeName"] = node
        if phase in ("Running", "Succeeded", "Failed") or waiting:
            pod["status"]["conditions"] = pod_conditions(ready, ts)
            pod["status"]["startTime"] = ts
        if waiting:
            # What the kubelet reports of a container that cannot start (CrashLoopBackOff:
            # it ran and exited, and is waiting to be restarted).
            crashed = waiting == "CrashLoopBackOff"
            pod["status"]["containerStatuses"] = [{
                "name": "app", "ready": False, "started": False,
                "restartCount": 3 if crashed else 0,
                "image": pod["spec"]["containers"][0]["image"], "imageID": "",
                "state": {"waiting": {"reason": waiting, "message": f"{waiting} (fixture)"}},
                **({"lastState": {"terminated": {"exitCode": 1, "reason": "Error"}}} if crashed else {}),
            }]
        with c.lock:
            if (ns, name) in c.store["pods"]:
                raise ControlError(f'pods "{name}" already exists in {ns}')
            c.stamp_new(PODS, pod, ns)
            if meta.get("ownerReferences") and meta["ownerReferences"][0]["kind"] == "Node":
                node_obj = c.store["nodes"].get(("", node))
                if node_obj:
                    meta["ownerReferences"][0]["uid"] = node_obj["metadata"]["uid"]
            c.store["pods"][(ns, name)] = pod
            return c.present(PODS, pod)

    @op("set_pod_ready")
    def set_pod_ready(args):
        c = get_cluster(args)
        key = (args.get("namespace", "default"), args["name"])
        with c.lock:
            pod = c.store["pods"].get(key)
            if pod is None:
                raise ControlError(f"no pod {key[0]}/{key[1]}")
            ready = bool(args.get("ready", True))
            st = pod.setdefault("status", {})
            if args.get("phase"):
                st["phase"] = args["phase"]
            elif ready:
                st["phase"] = "Running"
            st["conditions"] = pod_conditions(ready, rfc3339())
            st.setdefault("startTime", rfc3339())
            c.touch("pods", key, pod)
            return c.present(PODS, pod)

    @op("add_pdb")
    def add_pdb(args):
        c = get_cluster(args)
        ns = args.get("namespace", "default")
        spec = {}
        if args.get("selector") is not None:
            spec["selector"] = args["selector"]
        elif args.get("match_labels") is not None:
            spec["selector"] = {"matchLabels": args["match_labels"]}
        if args.get("min_available") is not None:
            spec["minAvailable"] = args["min_available"]
        if args.get("max_unavailable") is not None:
            spec["maxUnavailable"] = args["max_unavailable"]
        if args.get("unhealthy_pod_eviction_policy") is not None:
            spec["unhealthyPodEvictionPolicy"] = args["unhealthy_pod_eviction_policy"]
        obj = {"apiVersion": "policy/v1", "kind": "PodDisruptionBudget",
               "metadata": {"name": args["name"], "namespace": ns}, "spec": spec}
        with c.lock:
            _, out = api_call(lambda: create_object(c, PDBS, ns, obj, {}))
            return out

    @op("set_scale")
    def set_scale(args):
        """The replica count of a workload controller, used as a PDB's
        expected pod count (the stand-in has no Deployments/ReplicaSets)."""
        c = get_cluster(args)
        with c.lock:
            c.scales[(args.get("namespace", "default"), args["kind"], args["name"])] = int(args["replicas"])
        return {}

    @op("kube_state")
    def kube_state(args):
        c = get_cluster(args)
        c.tick()
        with c.lock:
            return {
                "nodes": [c.present(NODES, o) for _, o in sorted(c.store["nodes"].items())],
                "pods": [c.present(PODS, o) for _, o in sorted(c.store["pods"].items())],
                "pdbs": [c.present(PDBS, o) for _, o in sorted(c.store["poddisruptionbudgets"].items())],
                "events": [c.present(EVENTS, o) for _, o in sorted(c.store["events"].items())],
                "requests": list(c.requests),
                "resourceVersion": str(c.rv),
            }

    @op("kube_requests")
    def kube_requests(args):
        c = get_cluster(args)
        with c.lock:
            return {"requests": list(c.requests)}

    @op("sync_nodes")
    def sync_nodes(args):
        """Follow moto's EC2 instances: a Node per running instance tagged
        eks:cluster-name=<cluster> (or in `asg`), NotReady/removed as the
        instance stops/terminates. `ready` (default true), `never_ready_images`,
        `stalled_instances` (their kubelet stops posting status: Ready Unknown),
        `labels`, `register_delay_seconds`; `enabled: false` stops following."""
        c = get_cluster(args)
        with c.lock:
            if args.get("enabled") is False:
                c.sync = None
                return {}
            c.sync = {k: args.get(k) for k in ("asg", "ready", "never_ready_images", "labels", "register_delay_seconds",
                                               "kubelet_versions", "stalled_instances")}
            if c.sync["ready"] is None:
                c.sync["ready"] = True
        c.tick()
        with c.lock:
            return {"nodes": sorted(n for _, n in c.store["nodes"])}
