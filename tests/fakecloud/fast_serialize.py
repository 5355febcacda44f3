"""moto's response serializer, the same bytes in less time.

moto serializes a response by walking the botocore output shape and, for every member of
every object, asking an ``XFormedAttributePicker`` which attribute holds it: six alias
providers are built and tried, every name is run through ``xform_name``, and the member's
key path is compared with every response transformer. For DescribeInstances that is about
145 picks per instance and most of the call's time (1,000 instances: about a second).

The picks' *candidate names* depend only on the object's class, the member name and the
shape (and its parent), and the transformer that applies only on the key path; the values
are still read from the object each time. So a picker remembers, for the one response it
serializes (moto makes a picker per response), the candidate names per (class, member,
shape, parent) and the transformer per key path. Objects whose attribute lookup is dynamic
(``__getattr__``, a custom ``__getattribute__``, an instance-level ``Meta``) get the
original pick. ``set_enabled(False)`` (control op ``ec2_index``) puts the original back.
"""

from __future__ import annotations

ENABLED = True
_PATCHED = False
_NONE = object()
_STATIC_TYPES: dict = {}  # type -> whether its attribute lookup is the plain one


def set_enabled(on: bool) -> None:
    global ENABLED
    ENABLED = bool(on)


def _static(obj) -> bool:
    t = type(obj)
    known = _STATIC_TYPES.get(t)
    if known is None:
        plain = (
            getattr(t, "__getattribute__", None) in (object.__getattribute__, dict.__getattribute__, list.__getattribute__)
            and not hasattr(t, "__getattr__")
        )
        _STATIC_TYPES[t] = known = plain
    if not known:
        return False
    if obj.__class__ is not t:
        return False
    inst = getattr(obj, "__dict__", None)
    return not (inst is not None and "Meta" in inst)


def apply_patches() -> None:
    global _PATCHED
    if _PATCHED:
        return
    _PATCHED = True
    from moto.core import serialize
    from moto.core.utils import MISSING, get_value

    picker_cls = serialize.XFormedAttributePicker
    original_call = picker_cls.__call__
    possible_keys = picker_cls.get_possible_keys

    def call(self, context):
        if not ENABLED or type(self) is not picker_cls or self.alias_providers is not serialize.DEFAULT_ALIAS_PROVIDERS:
            return original_call(self, context)
        obj = context.obj
        if not _static(obj):
            return original_call(self, context)
        caches = self.__dict__.get("_fast")
        if caches is None:
            caches = self.__dict__["_fast"] = ({}, {}, tuple(self.response_transformers))
        keys_cache, transform_cache, transform_paths = caches
        shape = context.shape
        ck = (type(obj), context.key, id(shape), id(getattr(shape, "parent", None)))
        entry = keys_cache.get(ck)
        if entry is None or entry[0] is not shape or entry[1] is not getattr(shape, "parent", None):
            try:
                keys = tuple(possible_keys(self, context))
            except Exception:
                return original_call(self, context)
            entry = (shape, getattr(shape, "parent", None), keys)
            keys_cache[ck] = entry
        for possible_key in entry[2]:
            value = get_value(obj, possible_key, MISSING)
            if value is not MISSING:
                break
        else:
            value = None
        key_path = f"{context.key_path}.{context.key}"
        path = transform_cache.get(key_path, _NONE)
        if path is _NONE:
            path = next((p for p in transform_paths if key_path.endswith(p)), None)
            transform_cache[key_path] = path
        if path is not None:
            value = self.response_transformers[path](value)
        return value

    picker_cls.__call__ = call
