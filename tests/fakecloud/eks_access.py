"""EKS cluster access for moto: authentication mode and access entries.

moto's EKS has neither a cluster ``accessConfig`` nor the access entry API.
This module adds, in-process:

* ``accessConfig {authenticationMode, bootstrapClusterCreatorAdminPermissions}``
  on every cluster (DescribeCluster shows it). The real CreateCluster defaults to
  ``CONFIG_MAP`` when the request has no ``accessConfig``; so do moto's
  CreateCluster and the control op ``create_cluster`` (argument
  ``authentication_mode``); ``set_cluster`` changes it;
* CreateAccessEntry, ListAccessEntries, DescribeAccessEntry, UpdateAccessEntry,
  DeleteAccessEntry on EKS's REST-JSON routes
  (``/clusters/{name}/access-entries[/{principalArn}]``), with EKS's errors:
  unknown cluster or entry ``ResourceNotFoundException`` (404), a cluster in
  ``CONFIG_MAP`` mode ``InvalidRequestException`` (400), a second entry for the
  same principal ``ResourceInUseException`` (409), a principal that is not an
  IAM role or user ARN, a ``system:`` Kubernetes group, or groups/username on a
  non-STANDARD entry ``InvalidParameterException`` (400).

Not modelled: access policies (Associate/ListAssociatedAccessPolicies), the
cluster creator's bootstrap entry, IAM checks that the principal exists.
"""

from __future__ import annotations

import re
import threading
import uuid

from aws_fixtures import ACCOUNT_ID

_LOCK = threading.RLock()

# (account, region, cluster) -> principalArn -> entry (wire shape, createdAt/modifiedAt as datetimes)
_ENTRIES: dict[tuple[str, str, str], dict[str, dict]] = {}

AUTH_MODES = ("CONFIG_MAP", "API", "API_AND_CONFIG_MAP")
ENTRY_TYPES = ("STANDARD", "EC2_LINUX", "EC2_WINDOWS", "FARGATE_LINUX", "EC2", "HYBRID_LINUX", "HYPERPOD_LINUX")
MODE_MSG = "The cluster's authentication mode must be set to one of [API, API_AND_CONFIG_MAP] to perform this operation."
NOT_FOUND_MSG = (
    "The specified principalArn could not be found. You can view your available access entries with "
    "'list-access-entries'."
)
IN_USE_MSG = "The specified access entry resource is already in use on this cluster."
PRINCIPAL_RX = re.compile(r"^arn:aws[a-z-]*:iam::(\d{12}):(role|user)/(.+)$")


def reset() -> None:
    with _LOCK:
        _ENTRIES.clear()


def _now():
    from moto.core.utils import utcnow

    return utcnow()


def _error(cls_name: str, message: str, cluster: str | None = None):
    from moto.eks import exceptions

    fields = {"clusterName": cluster} if cluster else {}
    return getattr(exceptions, cls_name)(**fields, message=message)


def set_authentication_mode(cluster, mode: str | None) -> None:
    """Sets a moto Cluster's accessConfig (CONFIG_MAP when None)."""
    mode = mode or "CONFIG_MAP"
    if mode not in AUTH_MODES:
        raise ValueError(f"authentication mode must be one of {', '.join(AUTH_MODES)}, not {mode!r}")
    cluster.access_config = {"authenticationMode": mode, "bootstrapClusterCreatorAdminPermissions": True}


def _cluster(account: str, region: str, name: str):
    from moto.eks.models import CLUSTER_NOT_FOUND_MSG, eks_backends

    cluster = eks_backends[account][region].clusters.get(name)
    if cluster is None:
        raise _error("ResourceNotFoundException", CLUSTER_NOT_FOUND_MSG.format(clusterName=name))
    mode = (getattr(cluster, "access_config", None) or {}).get("authenticationMode", "CONFIG_MAP")
    if mode not in ("API", "API_AND_CONFIG_MAP"):
        raise _error("InvalidRequestException", MODE_MSG, name)
    return cluster


def _entries(account: str, region: str, cluster: str) -> dict[str, dict]:
    return _ENTRIES.setdefault((account, region, cluster), {})


def _principal(self) -> str:
    # The label is percent-encoded on the wire (`arn%3Aaws%3Aiam%3A%3A...%2Fname`).
    from urllib.parse import unquote

    return unquote(self._get_param("principalArn") or "")


def _check_groups(cluster: str, entry_type: str, groups, username) -> None:
    if entry_type != "STANDARD" and (groups or username):
        raise _error(
            "InvalidParameterException",
            f"Kubernetes groups and username cannot be specified for access entries of type {entry_type}.",
            cluster,
        )
    for g in groups or []:
        if not isinstance(g, str) or not g:
            raise _error("InvalidParameterException", "Kubernetes group names must be non-empty strings.", cluster)
        if g.startswith("system:"):
            raise _error(
                "InvalidParameterException",
                f"The kubernetes group name {g} is invalid, it cannot start with system:",
                cluster,
            )


def _create_access_entry(self):
    from moto.core.responses import ActionResult

    name = self._get_param("name")
    principal = self._get_param("principalArn") or ""
    entry_type = self._get_param("type") or "STANDARD"
    groups = self._get_param("kubernetesGroups") or []
    username = self._get_param("username")
    with _LOCK:
        _cluster(self.current_account, self.region, name)
        m = PRINCIPAL_RX.match(principal)
        if m is None:
            raise _error("InvalidParameterException", "The specified principalArn is invalid: invalid principal.", name)
        if entry_type not in ENTRY_TYPES:
            raise _error("InvalidParameterException", f"The specified type {entry_type} is invalid.", name)
        _check_groups(name, entry_type, groups, username)
        entries = _entries(self.current_account, self.region, name)
        if principal in entries:
            raise _error("ResourceInUseException", IN_USE_MSG, name)
        account, kind, path_name = m.group(1), m.group(2), m.group(3)
        short = path_name.rsplit("/", 1)[-1]
        if username is None and entry_type == "STANDARD":
            username = (
                f"arn:aws:sts::{account}:assumed-role/{short}/{{{{SessionName}}}}" if kind == "role" else principal
            )
        now = _now()
        entry = {
            "clusterName": name,
            "principalArn": principal,
            "kubernetesGroups": list(groups),
            "accessEntryArn": f"arn:aws:eks:{self.region}:{self.current_account}:access-entry/{name}/{kind}/"
            f"{account}/{short}/{uuid.uuid4()}",
            "createdAt": now,
            "modifiedAt": now,
            "tags": dict(self._get_param("tags") or {}),
            "type": entry_type,
        }
        if username is not None:
            entry["username"] = username
        entries[principal] = entry
        return ActionResult({"accessEntry": dict(entry)})


def _list_access_entries(self):
    from moto.core.responses import ActionResult

    name = self._get_param("name")
    max_results = int(self._get_param("maxResults") or 100)
    token = self._get_param("nextToken") or ""
    if not 1 <= max_results <= 100:
        raise _error("InvalidParameterException", "maxResults must be between 1 and 100.", name)
    with _LOCK:
        _cluster(self.current_account, self.region, name)
        arns = sorted(_entries(self.current_account, self.region, name))
    start = int(token) if token.isdigit() else 0
    page = arns[start : start + max_results]
    out = {"accessEntries": page}
    if start + max_results < len(arns):
        out["nextToken"] = str(start + max_results)
    return ActionResult(out)


def _describe_access_entry(self):
    from moto.core.responses import ActionResult

    name = self._get_param("name")
    principal = _principal(self)
    with _LOCK:
        _cluster(self.current_account, self.region, name)
        entry = _entries(self.current_account, self.region, name).get(principal)
        if entry is None:
            raise _error("ResourceNotFoundException", NOT_FOUND_MSG, name)
        return ActionResult({"accessEntry": dict(entry)})


def _update_access_entry(self):
    from moto.core.responses import ActionResult

    name = self._get_param("name")
    principal = _principal(self)
    with _LOCK:
        _cluster(self.current_account, self.region, name)
        entry = _entries(self.current_account, self.region, name).get(principal)
        if entry is None:
            raise _error("ResourceNotFoundException", NOT_FOUND_MSG, name)
        groups = self._get_param("kubernetesGroups")
        username = self._get_param("username")
        _check_groups(name, entry["type"], groups, username)
        if groups is not None:
            entry["kubernetesGroups"] = list(groups)
        if username is not None:
            entry["username"] = username
        entry["modifiedAt"] = _now()
        return ActionResult({"accessEntry": dict(entry)})


def _delete_access_entry(self):
    from moto.core.responses import EmptyResult

    name = self._get_param("name")
    principal = _principal(self)
    with _LOCK:
        _cluster(self.current_account, self.region, name)
        if _entries(self.current_account, self.region, name).pop(principal, None) is None:
            raise _error("ResourceNotFoundException", NOT_FOUND_MSG, name)
        return EmptyResult()


def _wrap_create_cluster(original):
    """CreateCluster keeps `accessConfig.authenticationMode` (default CONFIG_MAP, as the API)."""

    def create_cluster(self):
        access = self._get_param("accessConfig") or {}
        mode = access.get("authenticationMode") or "CONFIG_MAP"
        if mode not in AUTH_MODES:
            raise _error("InvalidParameterException", f"Unsupported authentication mode: {mode}")
        result = original(self)
        from moto.eks.models import eks_backends

        cluster = eks_backends[self.current_account][self.region].clusters.get(self._get_param("name"))
        if cluster is not None:
            set_authentication_mode(cluster, mode)
        return result

    return create_cluster


_PATCHED = False


def apply_patches() -> None:
    global _PATCHED
    if _PATCHED:
        return
    _PATCHED = True
    import moto.eks.urls as eks_urls
    from moto.eks.models import Cluster
    from moto.eks.responses import EKSResponse

    dispatch = eks_urls.response.dispatch
    eks_urls.url_paths.setdefault("{0}/clusters/(?P<name>[^/]+)/access-entries$", dispatch)
    # The principal ARN label may arrive with its `/` decoded: match the rest of the path.
    eks_urls.url_paths.setdefault("{0}/clusters/(?P<name>[^/]+)/access-entries/(?P<principalArn>.+)$", dispatch)
    Cluster.access_config = {"authenticationMode": "CONFIG_MAP", "bootstrapClusterCreatorAdminPermissions": True}
    EKSResponse.create_access_entry = _create_access_entry
    EKSResponse.list_access_entries = _list_access_entries
    EKSResponse.describe_access_entry = _describe_access_entry
    EKSResponse.update_access_entry = _update_access_entry
    EKSResponse.delete_access_entry = _delete_access_entry
    EKSResponse.create_cluster = _wrap_create_cluster(EKSResponse.create_cluster)


def entries_json(region: str, cluster: str) -> list:
    """Control-API view of a cluster's entries (plain JSON)."""
    with _LOCK:
        entries = _ENTRIES.get((ACCOUNT_ID, region, cluster), {})
        out = []
        for e in entries.values():
            e = dict(e)
            for k in ("createdAt", "modifiedAt"):
                e[k] = e[k].isoformat()
            out.append(e)
        return out
