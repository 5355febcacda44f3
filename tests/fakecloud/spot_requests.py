"""Spot requests of instances the tests launched some other way (an Auto Scaling group).

moto creates a Spot request only through RequestSpotInstances, which launches an instance of
its own, and never changes the request's status after ``fulfilled``. EC2: every Spot instance
has the request that launched it (``DescribeSpotInstanceRequests`` with the filter
``instance-id`` finds it; moto answers that filter from the request's instance), and when EC2
gives the two-minute interruption notice the request's status code becomes
``marked-for-termination`` (``marked-for-stop`` for an instance that stops or hibernates).

The control op ``spot_request_set`` gives an existing instance its Spot request (state
``active``) with a status code (default ``marked-for-termination``), or changes the code of the
one it has; the instance's lifecycle becomes ``spot``. Requests live in moto's backend: ``reset``
empties them with it.
"""

from __future__ import annotations

from datetime import datetime, timezone

from aws_fixtures import ACCOUNT_ID, DEFAULT_REGION

# Status messages as EC2 words them (the code is what callers read).
_MESSAGES = {
    "fulfilled": "Your Spot request is fulfilled.",
    "marked-for-termination": "Your Spot Instance is marked for termination.",
    "marked-for-stop": "Your Spot Instance is marked for stop.",
}


_CLASS = []


def _attached_request_class():
    if _CLASS:
        return _CLASS[0]
    from moto.ec2.models.core import TaggedEC2Resource
    from moto.ec2.models.spot_requests import LaunchSpecification, SpotInstanceRequest

    class AttachedSpotRequest(SpotInstanceRequest):
        """A Spot request for an instance that already runs (no launch of its own)."""

        # moto's model registry files a model under its module's service (`moto.ec2...`).
        __module__ = "moto.ec2.models.spot_requests"

        def __init__(self, ec2_backend, request_id: str, instance, code: str):
            TaggedEC2Resource.__init__(self)
            self.ec2_backend = ec2_backend
            self.id = request_id
            self.instance = instance
            self.launch_specification = LaunchSpecification(
                kernel_id=None,
                ramdisk_id=None,
                image_id=instance.image_id,
                key_name=None,
                instance_type=instance.instance_type,
                placement=instance.placement,
                monitored=False,
                subnet_id=getattr(instance, "subnet_id", None),
            )
            self.state = "active"
            self.price = None
            self.type = "one-time"
            self.valid_from = None
            self.valid_until = None
            self.launch_group = None
            self.availability_zone_group = None
            self.instance_interruption_behaviour = "terminate"
            self.user_data = None
            self.spot_fleet_id = None
            self.launch_spec = None
            self.all_tags = {}
            self.set_code(code)

        def set_code(self, code: str) -> None:
            self._status_code = code
            self.status_message = _MESSAGES.get(code, code)
            self._updated = datetime.now(timezone.utc).strftime("%Y-%m-%dT%H:%M:%S.000Z")

        @property
        def status(self):
            return {
                "Code": self._status_code,
                "Message": self.status_message,
                "UpdateTime": self._updated,
            }

    _CLASS.append(AttachedSpotRequest)
    return AttachedSpotRequest


def register(op, ControlError) -> None:  # noqa: N803 - class passed in
    @op("spot_request_set")
    def spot_request_set(args):
        """Give instance `instance` a Spot request with status `code` (default
        `marked-for-termination`), or set the code of the one it has. Returns `{id, code}`."""
        from moto.ec2.models import ec2_backends
        from moto.ec2.utils import random_spot_request_id

        region = args.get("region") or DEFAULT_REGION
        account = str(args.get("account") or ACCOUNT_ID)
        iid = args.get("instance")
        code = args.get("code") or "marked-for-termination"
        if not iid:
            raise ControlError("spot_request_set needs instance")
        backend = ec2_backends[account][region]
        try:
            instance = backend.get_instance(iid)
        except Exception as e:  # moto's InvalidInstanceIdError
            raise ControlError(f"no instance {iid}: {e}") from None
        cls = _attached_request_class()
        for req in backend.spot_instance_requests.values():
            if getattr(req, "instance", None) is instance:
                if isinstance(req, cls):
                    req.set_code(code)
                else:
                    req._status_code = code
                    req.status_message = _MESSAGES.get(code, code)
                return {"id": req.id, "code": code}
        req = cls(backend, random_spot_request_id(), instance, code)
        backend.spot_instance_requests[req.id] = req
        instance.lifecycle = "spot"
        return {"id": req.id, "code": code}
