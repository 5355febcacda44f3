"""DescribeInstances pages like EC2: MaxResults (5..1000) counts instances, not reservations.

moto cut the answer after MaxResults *reservations* (default 100) with the last reservation's
id as the NextToken, so 100 Auto Scaling groups of 100 instances each (one reservation per
scale-out) came back as one page of 10,000 instances whatever MaxResults said. EC2 counts the
instances: a page holds at most MaxResults instances, a reservation whose instances do not all
fit is split over consecutive pages (each page lists it with the instances of that page, under
the same reservation id), and without MaxResults the whole answer comes at once (EC2 pages
DescribeInstances only when asked to). The NextToken is opaque (`di-page-<instance id>`: the
next page starts after that instance in the answer's order, so instances launched or
terminated between pages do not shift it). Which instances match and their order (moto's:
reservations in launch order, instances in order) are unchanged; MaxResults together with
InstanceIds stays moto's InvalidParameterCombination, a MaxResults outside 5..1000 or an
unknown NextToken is InvalidParameterValue (messages modelled on EC2's).

This is fidelity, not speed: it applies with the speed-ups on and off (``moto_speedups``).
"""

from __future__ import annotations

import base64
import copy

from moto.core.responses import ActionResult
from moto.ec2.exceptions import InvalidParameterCombination, InvalidParameterValue

_TOKEN = "di-page-"


def _token(instance_id: str, prefix: str = _TOKEN) -> str:
    """An opaque NextToken naming the last instance served (`prefix`: which API's)."""
    return prefix + base64.urlsafe_b64encode(instance_id.encode()).decode().rstrip("=")


def _after(token: str, prefix: str = _TOKEN) -> str:
    """The instance id a NextToken of `prefix` names, or InvalidParameterValue."""
    bad = InvalidParameterValue(f"The value ({token}) for parameter nextToken is invalid.")
    if not isinstance(token, str) or not token.startswith(prefix):
        raise bad
    raw = token[len(prefix):]
    try:
        return base64.urlsafe_b64decode(raw + "=" * (-len(raw) % 4)).decode()
    except (ValueError, UnicodeDecodeError):
        raise bad from None


def _position(backend, instance_id):
    """(reservation index, instance index) of an instance in the backend's order, or None."""
    for r_index, res in enumerate(list(getattr(backend, "reservations", {}).values())):
        for i_index, inst in enumerate(list(res.instances)):
            if inst.id == instance_id:
                return r_index, i_index
    return None


def page(reservations: list, max_results, token, backend=None):
    """(the page's reservations, the NextToken or None) of an answer `reservations`."""
    if max_results is None and not token:
        return reservations, None
    # Where the page starts: after the token's instance, found in the answer (or, when it no
    # longer matches, by its place in the backend's order).
    skip = {}  # reservation id -> instances of it already served
    first_res = 0
    if token:
        after = _after(token)
        where = None
        for r_index, res in enumerate(reservations):
            ids = [i.id for i in res.instances]
            if after in ids:
                where = r_index
                skip[res.id] = ids.index(after) + 1
                break
        if where is None:
            pos = _position(backend, after) if backend is not None else None
            if pos is None:
                raise InvalidParameterValue(f"The value ({token}) for parameter nextToken is invalid.")
            order = {r.id: n for n, r in enumerate(list(backend.reservations.values()))}
            where = len(reservations)
            for r_index, res in enumerate(reservations):
                n = order.get(res.id, -1)
                if n > pos[0]:
                    where = r_index
                    break
                if n == pos[0]:
                    full = [i.id for i in backend.reservations[res.id].instances]
                    served = set(full[: pos[1] + 1])
                    skip[res.id] = sum(1 for i in res.instances if i.id in served)
                    where = r_index
                    break
        first_res = where
    out = []
    taken = 0
    for r_index in range(first_res, len(reservations)):
        res = reservations[r_index]
        members = list(res.instances)
        rest = members[skip.get(res.id, 0):]
        if not rest:
            continue
        room = None if max_results is None else max_results - taken
        if room is not None and len(rest) > room:
            part = copy.copy(res)
            part.instances = rest[:room]
            out.append(part)
            return out, _token(rest[room - 1].id)
        if len(rest) == len(members):
            out.append(res)
        else:
            part = copy.copy(res)
            part.instances = rest
            out.append(part)
        taken += len(rest)
        if max_results is not None and taken == max_results:
            if any(list(r.instances) for r in reservations[r_index + 1:]):
                return out, _token(rest[-1].id)
            return out, None
    return out, None


def apply_patches() -> None:
    from moto.ec2.responses.instances import InstanceResponse

    def describe_instances(self) -> ActionResult:
        self.error_on_dryrun()
        if "InstanceId.1" in self.data and "MaxResults" in self.data:
            raise InvalidParameterCombination(
                "The parameter instancesSet cannot be used with the parameter maxResults"
            )
        requested = self._get_param("MaxResults")
        max_results = int(requested) if requested is not None else None
        if max_results is not None and not 5 <= max_results <= 1000:
            raise InvalidParameterValue(
                f"Value ( {max_results} ) for parameter maxResults is invalid. Parameter must be between 5 and 1000."
            )
        filter_dict = self._filters_from_querystring()
        instance_ids = self._get_param("InstanceIds", [])
        token = self._get_param("NextToken")
        if instance_ids:
            reservations = self.ec2_backend.get_reservations_by_instance_ids(instance_ids, filters=filter_dict)
        else:
            reservations = self.ec2_backend.describe_instances(filters=filter_dict)
        reservations_resp, next_token = page(list(reservations), max_results, token, self.ec2_backend)
        return ActionResult({"Reservations": reservations_resp, "NextToken": next_token})

    InstanceResponse.describe_instances = describe_instances
