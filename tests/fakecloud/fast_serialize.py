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
original pick.

Structures go further (``fast_structure``): the member steps of a (class, shape, key path)
are planned once per response (candidate names, transformer, and for scalar members their
``_serialize_type_*`` method, called without moto's path push and pop, which only nested
lookups read), and the key path is joined once per object instead of once per member.

The XML text is then written by ``xmltodict.unparse`` through a SAX ``XMLGenerator``, one
method call per element and attribute. ``_unparse`` writes the same text (same escaping and
quoting, ``<x/>`` for empty elements, the same declaration) for the one form moto uses
(a new string, ``short_empty_elements``, not pretty); anything it does not handle exactly
(comments, namespace maps, invalid names, several roots, any error) is left to xmltodict,
which then answers or raises as it always does.

``set_enabled(False)`` (control op ``moto_speedups``) puts the originals back.
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


class _Fallback(Exception):
    """The fast emitter does not write this document exactly: let xmltodict do it."""


_VALID_NAMES: set = set()


def _check_name(name) -> None:
    """xmltodict's _validate_name, remembered per name (a failure is xmltodict's to report)."""
    if name in _VALID_NAMES:
        return
    if (
        not isinstance(name, str)
        or name.startswith("?")
        or name.startswith("!")
        or any(c in name for c in "<>/\"'=")
        or any(ch.isspace() for ch in name)
    ):
        raise _Fallback()
    if len(_VALID_NAMES) < 100_000:
        _VALID_NAMES.add(name)


def _text(value) -> str:
    """xmltodict's _convert_value_to_string (utf-8, errors replaced)."""
    if isinstance(value, str):
        return value
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (bytes, bytearray, memoryview)):
        return bytes(value).decode("utf-8", errors="replace")
    return str(value)


def _unparse(input_dict, full_document: bool) -> str:
    """``xmltodict.unparse(input_dict, full_document=..., short_empty_elements=True)``."""
    from xml.sax.saxutils import escape, quoteattr

    out: list = []
    write = out.append
    pending = [False]  # a start tag waits for ">" or "/>"

    def emit(key, value, depth):
        if key == "#comment":
            raise _Fallback()
        _check_name(key)
        if not hasattr(value, "__iter__") or isinstance(value, (str, bytes, bytearray, memoryview, dict)):
            value = [value]
        for index, v in enumerate(value):
            if full_document and depth == 0 and index > 0:
                raise _Fallback()
            if v is None:
                v = {}
            elif not isinstance(v, (dict, str)):
                v = _text(v)
            if isinstance(v, str):
                # A text element (most of them): what the steps below write for {"#text": v}.
                if pending[0]:
                    write(">")
                    pending[0] = False
                write(f"<{key}>{escape(v)}</{key}>" if v else f"<{key}/>")
                continue
            cdata = None
            attrs: dict = {}
            children = []
            for ik, iv in v.items():
                if ik == "#text":
                    cdata = None if iv is None else _text(iv)
                    continue
                if isinstance(ik, str) and ik.startswith("@"):
                    if ik == "@xmlns" and isinstance(iv, dict):
                        raise _Fallback()
                    iv = "" if iv is None else _text(iv)
                    name = ik[1:]
                    _check_name(name)
                    attrs[name] = iv
                    continue
                if isinstance(iv, list) and not iv:
                    continue
                children.append((ik, iv))
            if pending[0]:
                write(">")
            if attrs:
                write("<" + key + "".join(f" {n}={quoteattr(a)}" for n, a in attrs.items()))
            else:
                write("<" + key)
            pending[0] = True
            for child_key, child_value in children:
                emit(child_key, child_value, depth + 1)
            if cdata:
                if pending[0]:
                    write(">")
                    pending[0] = False
                write(escape(cdata))
            if pending[0]:
                write("/>")
                pending[0] = False
            else:
                write(f"</{key}>")

    if full_document:
        write('<?xml version="1.0" encoding="utf-8"?>\n')
    seen_root = False
    for key, value in input_dict.items():
        if key == "#comment" or (full_document and seen_root):
            raise _Fallback()
        emit(key, value, 0)
        seen_root = True
    if full_document and not seen_root:
        raise _Fallback()
    return "".join(out)


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

    def usable(picker, obj) -> bool:
        return (
            ENABLED
            and type(picker) is picker_cls
            and picker.alias_providers is serialize.DEFAULT_ALIAS_PROVIDERS
            and _static(obj)
        )

    def read(obj, keys, keyed):
        """The first of the candidate names `keys` that `obj` holds, else None:
        moto.core.utils.get_value, inlined (item lookup for mappings and sequences, attributes
        otherwise, dotted names as paths through get_value itself)."""
        for possible_key in keys:
            if "." in possible_key:
                value = get_value(obj, possible_key, MISSING)
            elif keyed:
                try:
                    value = obj[possible_key]
                except (KeyError, IndexError, TypeError, AttributeError):
                    value = MISSING
            else:
                value = getattr(obj, possible_key, MISSING)
            if value is not MISSING:
                return value
        return None

    def pick(picker, obj, key, shape, prefix, context):
        """What ``XFormedAttributePicker.__call__`` answers; `context()` makes its context
        (only needed the first time a (class, member, shape) comes up in this response)."""
        caches = picker.__dict__.get("_fast")
        if caches is None:
            caches = picker.__dict__["_fast"] = ({}, {}, tuple(picker.response_transformers))
        keys_cache, transform_cache, transform_paths = caches
        parent = getattr(shape, "parent", None)
        ck = (type(obj), key, id(shape), id(parent))
        entry = keys_cache.get(ck)
        if entry is None or entry[0] is not shape or entry[1] is not parent:
            ctx = context()
            try:
                keys = tuple(possible_keys(picker, ctx))
            except Exception:
                return original_call(picker, ctx)
            entry = (shape, parent, keys)
            keys_cache[ck] = entry
        value = read(obj, entry[2], hasattr(obj, "__getitem__"))
        key_path = f"{prefix}.{key}"
        path = transform_cache.get(key_path, _NONE)
        if path is _NONE:
            path = next((p for p in transform_paths if key_path.endswith(p)), None)
            transform_cache[key_path] = path
        if path is not None:
            value = picker.response_transformers[path](value)
        return value

    def call(self, context):
        if not usable(self, context.obj):
            return original_call(self, context)
        return pick(self, context.obj, context.key, context.shape, context.key_path, lambda: context)

    original_get_value = serialize.ResponseSerializer.get_value

    def serializer_get_value(self, value, key, shape):
        picker = self._value_picker
        if not usable(picker, value):
            return original_get_value(self, value, key, shape)
        prefix = ".".join(self.path)
        return pick(
            picker, value, key, shape, prefix,
            lambda: serialize.AttributePickerContext(
                obj=value, key=key, shape=shape, operation_model=self.operation_model,
                service_model=self.operation_model.service_model, key_path=prefix,
            ),
        )

    serialize.ResponseSerializer.get_value = serializer_get_value
    picker_cls.__call__ = call

    base = serialize.ResponseSerializer
    original_structure = base._serialize_type_structure
    base_member = base._serialize_structure_member
    base_dispatch = base._serialize
    # Member types whose _serialize_type_* methods neither read self.path nor recurse: they
    # are called directly (moto's _serialize only adds the path push and pop around them).
    scalar_types = frozenset(("string", "integer", "long", "boolean", "timestamp", "float", "double", "blob"))
    plain_classes: dict = {}

    def plain(cls) -> bool:
        """The structure walk of `cls` is ResponseSerializer's own (no override of the member
        step, the dispatch or the value lookup)."""
        known = plain_classes.get(cls)
        if known is None:
            known = (
                cls._serialize_structure_member is base_member
                and cls._serialize is base_dispatch
                and cls.get_value is serializer_get_value
            )
            plain_classes[cls] = known
        return known

    def plan_of(self, picker, value, shape, prefix):
        """The member steps of `shape` for objects of `value`'s class at key path `prefix`, in
        this response: (member key, member shape, candidate names, transformer path, scalar
        method or None) each, as ``pick`` and ``_serialize`` would find them."""
        caches = picker.__dict__.get("_fast")
        if caches is None:
            caches = picker.__dict__["_fast"] = ({}, {}, tuple(picker.response_transformers))
        plans = picker.__dict__.get("_fast_plans")
        if plans is None:
            plans = picker.__dict__["_fast_plans"] = {}
        pk = (type(value), id(shape), prefix)
        plan = plans.get(pk)
        if plan is not None and plan[0] is shape:
            return plan[1]
        keys_cache, transform_cache, transform_paths = caches
        steps = []
        for member_key, member_shape in shape.members.items():
            member_shape.parent = shape
            ctx = serialize.AttributePickerContext(
                obj=value, key=member_key, shape=member_shape, operation_model=self.operation_model,
                service_model=self.operation_model.service_model, key_path=prefix,
            )
            try:
                keys = tuple(possible_keys(picker, ctx))
            except Exception:
                return None
            key_path = f"{prefix}.{member_key}"
            path = transform_cache.get(key_path, _NONE)
            if path is _NONE:
                path = next((p for p in transform_paths if key_path.endswith(p)), None)
                transform_cache[key_path] = path
            type_name = member_shape.type_name
            method = None
            if type_name in scalar_types:
                method = getattr(self, f"_serialize_type_{type_name}", self._default_serialize)
            steps.append((member_key, member_shape, keys, path, method, any("." in k for k in keys)))
        plans[pk] = (shape, steps)
        return steps

    def fast_structure(self, serialized, value, shape, key):
        """``_serialize_type_structure`` with the member steps planned once per (class, shape,
        key path) and response: the candidate names and the transformer of each member as
        ``pick`` finds them, the path prefix joined once (moto joined it for every member: the
        same string, as the path does not change between members), scalar members written by
        their own ``_serialize_type_*`` method without the path push and pop around it."""
        if value is None:
            return
        picker = self._value_picker
        if not (ENABLED and plain(type(self)) and usable(picker, value)):
            return original_structure(self, serialized, value, shape, key)
        prefix = ".".join(self.path)
        steps = plan_of(self, picker, value, shape, prefix)
        if steps is None:
            return original_structure(self, serialized, value, shape, key)
        wrapper = self.MAP_TYPE() if key else serialized
        keyed = hasattr(value, "__getitem__")
        transformers = picker.response_transformers
        for member_key, member_shape, keys, path, method, dotted in steps:
            member_shape.parent = shape
            if keyed or dotted:
                member_value = read(value, keys, keyed)
            else:  # read() for plain attribute names, without its call
                member_value = None
                for possible_key in keys:
                    found = getattr(value, possible_key, MISSING)
                    if found is not MISSING:
                        member_value = found
                        break
            if path is not None:
                member_value = transformers[path](member_value)
            if member_value is None:
                continue
            if method is not None:
                method(wrapper, member_value, member_shape, member_key)
            else:
                self._serialize(wrapper, member_value, member_shape, member_key)
        if key:
            self._default_serialize(serialized, wrapper, shape, key)

    base._serialize_type_structure = fast_structure

    import xmltodict

    class XmlToDict:
        """The xmltodict module as moto's serializer sees it: unparse written fast."""

        def __getattr__(self, name):
            return getattr(xmltodict, name)

        @staticmethod
        def unparse(input_dict, output=None, encoding="utf-8", full_document=True, short_empty_elements=False, **kw):
            if (
                ENABLED
                and output is None
                and encoding == "utf-8"
                and short_empty_elements
                and set(kw) <= {"pretty"}
                and not kw.get("pretty")
                and isinstance(input_dict, dict)
            ):
                try:
                    return _unparse(input_dict, full_document)
                except Exception:  # _Fallback or anything else: xmltodict answers (or raises)
                    pass
            return xmltodict.unparse(
                input_dict, output=output, encoding=encoding, full_document=full_document,
                short_empty_elements=short_empty_elements, **kw,
            )

    serialize.xmltodict = XmlToDict()
