"""Indexed instance, tag and volume lookups for moto's EC2 (speed only: the same answers).

moto finds an instance by walking every reservation of the region (and copying each one),
a tagged resource by walking every instance and reading its tags, and a volume by id by
walking every volume. Launching one instance looks itself up that way (attach its root
volume, tag the volume), so a fleet of N instances costs N^2 to seed, and every
DescribeInstances by id or tag costs N. With 50,000 instances moto answered 23 calls a second.

The indexes here only narrow where moto looks; moto's own predicates still decide what
matches, and answers keep moto's order (reservations in launch order, instances in their
reservation's order, copies of the reservations as moto returns them), so pagination tokens
and page contents are unchanged.

* **instance id -> reservation**: every ``Reservation.instances`` is an ``_Instances`` list
  that records, as instances join it, which reservation holds them. A lookup is trusted only
  after checking that the reservation is still the backend's and still holds that instance;
  any doubt (an unknown id, a list moto replaced) goes to moto's own walk, which also raises
  moto's own errors.
* **tags**: ``TagBackend.tags`` (resource id -> {key: value}) is a ``_TagStore`` whose
  per-resource dicts update a (key -> value -> resource ids) index on every write, whoever
  writes (CreateTags, DeleteTags, launches, Auto Scaling, direct writes). A ``tag:K`` filter
  narrows DescribeInstances to the resources with key K (and, for literal values, with those
  values); ``instance-id`` to those ids.
* **volumes by id**: DescribeVolumes of one id reads it directly.

``set_enabled(False)`` (control op ``moto_speedups``) puts moto's original functions back in
force at once (same state), so a self-check can ask the same question both ways.
``FAKECLOUD_INDEX_CHECK=1`` also runs moto's original next to every indexed answer and
records any difference (``stats()``), which the self-check asserts to be none.
"""

from __future__ import annotations

import copy
import os
import threading
import weakref

ENABLED = True
CHECK = os.environ.get("FAKECLOUD_INDEX_CHECK") == "1"
_STATS = {"indexed": 0, "fallback": 0, "checked": 0, "mismatches": []}
_STATS_LOCK = threading.Lock()
_PATCHED = False
# instance id -> the Reservation whose instances list it joined last (validated on use).
_OWNER: "weakref.WeakValueDictionary[str, object]" = weakref.WeakValueDictionary()
_MISSING = object()
_WILDCARDS = frozenset("*?[")


def set_enabled(on: bool) -> None:
    global ENABLED
    ENABLED = bool(on)


def stats() -> dict:
    with _STATS_LOCK:
        return {
            "enabled": ENABLED,
            "check": CHECK,
            "indexed": _STATS["indexed"],
            "fallback": _STATS["fallback"],
            "checked": _STATS["checked"],
            "mismatches": list(_STATS["mismatches"]),
        }


def _count(what: str) -> None:
    with _STATS_LOCK:
        _STATS[what] += 1


# --------------------------------------------------------------------------
# reservation -> instances, instance id -> reservation
# --------------------------------------------------------------------------


class _Instances(list):
    """``Reservation.instances``: a list that keeps an id -> instance map of its members and
    tells ``_OWNER`` which reservation holds each instance that joins."""

    def __init__(self, reservation=None, items=()):
        super().__init__(items)
        self._reservation = weakref.ref(reservation) if reservation is not None else None
        self._ids: dict = {}
        self._joined(self)

    def _joined(self, items) -> None:
        res = self._reservation() if self._reservation is not None else None
        for inst in items:
            iid = getattr(inst, "id", None)
            if iid is None:
                continue
            self._ids[iid] = inst
            if res is not None:
                _OWNER[iid] = res

    def _rebuild(self) -> None:
        ids = {}
        for inst in self:
            iid = getattr(inst, "id", None)
            if iid is not None and iid not in ids:
                ids[iid] = inst
        self._ids = ids

    def owned_by(self, reservation) -> bool:
        return self._reservation is not None and self._reservation() is reservation

    def append(self, inst):
        super().append(inst)
        self._joined([inst])

    def extend(self, items):
        items = list(items)
        super().extend(items)
        self._joined(items)

    def insert(self, index, inst):
        super().insert(index, inst)
        self._joined([inst])

    def __iadd__(self, items):
        self.extend(items)
        return self

    def __setitem__(self, index, value):
        super().__setitem__(index, value)
        self._rebuild()
        res = self._reservation() if self._reservation is not None else None
        if res is not None:
            for iid in self._ids:
                _OWNER[iid] = res

    def __delitem__(self, index):
        super().__delitem__(index)
        self._rebuild()

    def __imul__(self, n):
        result = super().__imul__(n)
        self._rebuild()
        return result

    def remove(self, inst):
        super().remove(inst)
        self._rebuild()

    def pop(self, *args):
        inst = super().pop(*args)
        self._rebuild()
        return inst

    def clear(self):
        super().clear()
        self._ids = {}

    def __reduce_ex__(self, protocol):  # copies and pickles are plain lists
        return (list, (list(self),))


def _find(backend, instance_id):
    """(reservation, instance) if the index knows the instance and the backend still holds
    it there; None when in doubt (the caller then asks moto)."""
    if not isinstance(instance_id, str):
        return None
    res = _OWNER.get(instance_id)
    if res is None:
        return None
    reservations = getattr(backend, "reservations", None)
    if reservations is None or reservations.get(res.id) is not res:
        return None
    members = res.instances
    if type(members) is _Instances and members.owned_by(res):
        inst = members._ids.get(instance_id)
    else:
        inst = next((i for i in members if i.id == instance_id), None)
    return None if inst is None else (res, inst)


# --------------------------------------------------------------------------
# tags: resource id -> {key: value} with a key -> value -> ids index
# --------------------------------------------------------------------------


class _TagIndex:
    def __init__(self):
        self.lock = threading.Lock()
        self.by_key: dict = {}  # key -> {value -> set(resource id)}
        self.broken = False  # an unhashable value was stored: answer nothing from here

    def add(self, rid, key, value) -> None:
        try:
            with self.lock:
                self.by_key.setdefault(key, {}).setdefault(value, set()).add(rid)
        except TypeError:
            self.broken = True

    def discard(self, rid, key, value) -> None:
        try:
            with self.lock:
                values = self.by_key.get(key)
                if values is None:
                    return
                ids = values.get(value)
                if ids is None:
                    return
                ids.discard(rid)
                if not ids:
                    del values[value]
                    if not values:
                        del self.by_key[key]
        except TypeError:
            self.broken = True

    def ids(self, key, values=None):
        """Resource ids with tag `key` (set to one of `values` when given), or None if the
        index cannot answer."""
        if self.broken:
            return None
        with self.lock:
            by_value = self.by_key.get(key) or {}
            out = set()
            if values is None:
                for ids in by_value.values():
                    out |= ids
            else:
                for v in values:
                    out |= by_value.get(v, set())
            return out


class _ResourceTags(dict):
    """One resource's tags; every write goes to the index (added before the write is visible,
    removed after it is gone, so a concurrent reader never misses a match)."""

    def __init__(self, index=None, rid=None):
        super().__init__()
        self._index = index
        self._rid = rid

    def __setitem__(self, key, value):
        old = self.get(key, _MISSING)
        if self._index is not None:
            self._index.add(self._rid, key, value)
        super().__setitem__(key, value)
        if self._index is not None and old is not _MISSING and old != value:
            self._index.discard(self._rid, key, old)

    def __delitem__(self, key):
        old = self[key]
        super().__delitem__(key)
        if self._index is not None:
            self._index.discard(self._rid, key, old)

    def pop(self, key, *default):
        if key not in self:
            if default:
                return default[0]
            raise KeyError(key)
        old = self[key]
        super().pop(key)
        if self._index is not None:
            self._index.discard(self._rid, key, old)
        return old

    def popitem(self):
        key, old = super().popitem()
        if self._index is not None:
            self._index.discard(self._rid, key, old)
        return key, old

    def setdefault(self, key, default=None):
        if key not in self:
            self[key] = default
        return self[key]

    def update(self, *args, **kw):
        for key, value in dict(*args, **kw).items():
            self[key] = value

    def __ior__(self, other):
        self.update(other)
        return self

    def clear(self):
        for key in list(self):
            del self[key]

    def __reduce_ex__(self, protocol):  # copies and pickles are plain dicts
        return (dict, (dict(self),))


class _TagStore(dict):
    """``TagBackend.tags``: resource id -> _ResourceTags (created on first access, like the
    defaultdict(dict) it replaces), with the index of all of them."""

    def __init__(self, source=None):
        super().__init__()
        self.index = _TagIndex()
        for rid, tags in dict(source or {}).items():
            self[rid] = tags

    def __missing__(self, rid):
        # dict.setdefault is atomic: two threads creating one resource's tags share one dict.
        return dict.setdefault(self, rid, _ResourceTags(self.index, rid))

    def __setitem__(self, rid, tags):
        fresh = _ResourceTags(self.index, rid)
        for key, value in dict(tags).items():
            fresh[key] = value
        old = self.get(rid)
        super().__setitem__(rid, fresh)
        if old is not None:
            self._forget(rid, old, keep=fresh)

    def _forget(self, rid, tags, keep=None) -> None:
        for key, value in dict.items(tags):
            if keep is not None and keep.get(key, _MISSING) == value:
                continue
            self.index.discard(rid, key, value)

    def __delitem__(self, rid):
        old = self[rid]
        super().__delitem__(rid)
        self._forget(rid, old)

    def pop(self, rid, *default):
        if rid not in self:
            if default:
                return default[0]
            raise KeyError(rid)
        old = dict.__getitem__(self, rid)
        super().pop(rid)
        self._forget(rid, old)
        return old

    def popitem(self):
        rid, old = super().popitem()
        self._forget(rid, old)
        return rid, old

    def setdefault(self, rid, default=None):
        if rid not in self:
            self[rid] = default or {}
        return dict.__getitem__(self, rid)

    def update(self, *args, **kw):
        for rid, tags in dict(*args, **kw).items():
            self[rid] = tags

    def clear(self):
        for rid in list(self):
            del self[rid]

    def copy(self):
        return dict(self)

    def __reduce_ex__(self, protocol):
        return (dict, (dict(self),))


_CONVERT_LOCK = threading.Lock()


def _tag_index(backend):
    """The backend's tag index (converting a store created before the patch)."""
    store = getattr(backend, "tags", None)
    if isinstance(store, _TagStore):
        return store.index
    if store is None:
        return None
    with _CONVERT_LOCK:
        store = backend.tags
        if not isinstance(store, _TagStore):
            store = _TagStore(store)
            backend.tags = store
    return store.index


# --------------------------------------------------------------------------
# the patched functions
# --------------------------------------------------------------------------


def _same(a, b) -> bool:
    """Indexed vs original answer: the same objects in the same order (reservation copies
    compared by id and their instances by identity)."""
    if isinstance(a, list) and isinstance(b, list):
        return len(a) == len(b) and all(_same(x, y) for x, y in zip(a, b))
    if hasattr(a, "instances") and hasattr(b, "instances") and hasattr(a, "id"):
        return a.id == b.id and _same(list(a.instances), list(b.instances))
    if isinstance(a, dict) and isinstance(b, dict):
        return a == b
    return a is b


def _describe(x) -> str:
    if isinstance(x, list):
        return "[" + ", ".join(_describe(i) for i in x[:20]) + (", ..." if len(x) > 20 else "") + "]"
    if hasattr(x, "instances") and hasattr(x, "id"):
        return f"{x.id}:{[i.id for i in x.instances]}"
    return getattr(x, "id", None) or repr(x)


def _checked(name, answer, original, *args, **kw):
    """The indexed answer; in check mode also moto's, recording any difference."""
    _count("indexed")
    if not CHECK:
        return answer
    try:
        expected = original(*args, **kw)
    except Exception as e:  # moto would have raised: the index answered where it must not
        expected = e
    with _STATS_LOCK:
        _STATS["checked"] += 1
        if isinstance(expected, Exception) or not _same(answer, expected):
            _STATS["mismatches"].append(
                {"function": name, "args": repr(args[1:])[:500], "kwargs": repr(kw)[:500],
                 "indexed": _describe(answer)[:1000], "moto": _describe(expected)[:1000]}
            )
    return answer


def _fallback(original, *args, **kw):
    _count("fallback")
    return original(*args, **kw)


def _literal(values) -> bool:
    return isinstance(values, (list, tuple)) and all(
        isinstance(v, str) and not (_WILDCARDS & set(v)) for v in values
    )


def _candidates(backend, filters, exact=None):
    """Resource ids that include every instance passing `filters`, or None when no filter
    can be answered from an index. The names of the filters the ids answer exactly (literal
    tag values, literal tag keys, instance ids: moto's predicate says the same of each
    instance) are added to `exact` when given."""
    sets = []
    for name, values in filters.items():
        if name == "instance-id" and isinstance(values, (list, tuple)):
            sets.append(set(values))
            if exact is not None and all(isinstance(v, str) for v in values):
                exact.add(name)
        elif isinstance(name, str) and name.startswith("tag:"):
            index = _tag_index(backend)
            literal = _literal(values)
            ids = None if index is None else index.ids(name[4:], list(values) if literal else None)
            if ids is not None:
                sets.append(ids)
                if literal and exact is not None:
                    exact.add(name)
        elif name == "tag-key" and _literal(values):
            index = _tag_index(backend)
            if index is not None:
                ids = set()
                for key in values:
                    found = index.ids(key)
                    if found is None:
                        ids = None
                        break
                    ids |= found
                if ids is not None:
                    sets.append(ids)
                    if exact is not None:
                        exact.add(name)
    if not sets:
        return None
    sets.sort(key=len)
    out = set(sets[0])
    for s in sets[1:]:
        out &= s
    return out


def apply_patches() -> None:
    global _PATCHED
    if _PATCHED:
        return
    _PATCHED = True
    from moto.ec2.models.elastic_block_store import EBSBackend
    from moto.ec2.models.instances import InstanceBackend, Reservation
    from moto.ec2.models.tags import TagBackend
    from moto.ec2.utils import (
        filter_dict_attribute_mapping,
        filter_reservations,
        generic_filter,
        is_tag_filter,
        passes_filter_dict,
    )

    reservation_init = Reservation.__init__

    def reservation_init_tracked(self, *args, **kw):
        reservation_init(self, *args, **kw)
        self.instances = _Instances(self, self.instances)

    Reservation.__init__ = reservation_init_tracked

    tag_init = TagBackend.__init__

    def tag_init_indexed(self, *args, **kw):
        tag_init(self, *args, **kw)
        self.tags = _TagStore(self.tags)

    TagBackend.__init__ = tag_init_indexed

    orig_get_instance = InstanceBackend.get_instance

    def get_instance(self, instance_id):
        if ENABLED:
            found = _find(self, instance_id)
            if found is not None:
                return _checked("get_instance", found[1], orig_get_instance, self, instance_id)
        return _fallback(orig_get_instance, self, instance_id)

    orig_get_instance_by_id = InstanceBackend.get_instance_by_id

    def get_instance_by_id(self, instance_id):
        if ENABLED:
            found = _find(self, instance_id)
            if found is not None:
                return _checked("get_instance_by_id", found[1], orig_get_instance_by_id, self, instance_id)
        return _fallback(orig_get_instance_by_id, self, instance_id)

    orig_multi = InstanceBackend.get_multi_instances_by_id

    def get_multi_instances_by_id(self, instance_ids, filters=None):
        if ENABLED and isinstance(instance_ids, (list, tuple)):
            found = []
            for iid in instance_ids:
                hit = _find(self, iid)
                if hit is None:
                    break
                found.append(hit[1])
            else:
                answer = [inst for inst in found if inst.applies(filters)]
                return _checked("get_multi_instances_by_id", answer, orig_multi, self, instance_ids, filters)
        return _fallback(orig_multi, self, instance_ids, filters)

    orig_by_ids = InstanceBackend.get_reservations_by_instance_ids

    def get_reservations_by_instance_ids(self, instance_ids, filters=None):
        if ENABLED and isinstance(instance_ids, (list, tuple)) and len(set(instance_ids)) == len(instance_ids):
            picked = {}
            for iid in instance_ids:
                hit = _find(self, iid)
                if hit is None:
                    break
                picked[hit[0].id] = hit[0]
            else:
                wanted = set(instance_ids)
                reservations = []
                for rid in list(self.reservations):
                    res = picked.get(rid)
                    if res is None:
                        continue
                    c = copy.copy(res)
                    c.instances = [i for i in res.instances if i.id in wanted]
                    reservations.append(c)
                if filters is not None:
                    reservations = filter_reservations(reservations, filters)
                return _checked(
                    "get_reservations_by_instance_ids", reservations, orig_by_ids, self, instance_ids, filters
                )
        return _fallback(orig_by_ids, self, instance_ids, filters)

    orig_all_reservations = InstanceBackend.all_reservations

    def all_reservations(self, filters=None):
        if ENABLED and filters and isinstance(filters, dict):
            answer = _filtered_reservations(self, filters)
            if answer is not None:
                return _checked("all_reservations", answer, orig_all_reservations, self, filters)
        return _fallback(orig_all_reservations, self, filters) if filters else orig_all_reservations(self, filters)

    def _filtered_reservations(backend, filters):
        # Only filters moto implements: for any other one moto raises (when it holds an
        # instance), and so must the answer here.
        if not all(isinstance(n, str) and (n in filter_dict_attribute_mapping or is_tag_filter(n)) for n in filters):
            return None
        exact: set = set()
        cands = _candidates(backend, filters, exact)
        if cands is None:
            return None
        # What the index answered exactly is not asked again of every instance (moto's tag
        # predicate reads all tags of the instance per filter value); the rest is moto's.
        rest = {n: v for n, v in filters.items() if n not in exact}
        picked = {}
        for rid in cands:
            if not isinstance(rid, str) or not rid.startswith("i-"):
                continue  # another resource's tags
            hit = _find(backend, rid)
            if hit is None:
                return None  # an instance id the index does not know: ask moto
            picked[hit[0].id] = hit[0]
        out = []
        for rid in list(backend.reservations):
            res = picked.get(rid)
            if res is None:
                continue
            kept = [i for i in res.instances if i.id in cands and (not rest or passes_filter_dict(i, rest))]
            if kept:
                c = copy.copy(res)
                c.instances = kept
                out.append(c)
        return out

    orig_describe_volumes = EBSBackend.describe_volumes

    def describe_volumes(self, volume_ids=None, filters=None):
        if ENABLED and isinstance(volume_ids, (list, tuple)) and len(volume_ids) == 1:
            vol = self.volumes.get(volume_ids[0])
            if vol is not None:
                matches = [vol]
                if filters:
                    matches = generic_filter(filters, matches)
                return _checked("describe_volumes", matches, orig_describe_volumes, self, volume_ids, filters)
        return _fallback(orig_describe_volumes, self, volume_ids, filters)

    from moto.ec2 import utils as ec2_utils

    orig_tag_filter_matches = ec2_utils.tag_filter_matches
    regexes_of: dict = {}  # tuple(filter values) -> (set of them, compiled patterns, all literal)

    def tag_filter_matches(obj, filter_name, filter_values):
        """moto's tag_filter_matches with each value's pattern compiled once (moto translated
        and compiled every value for every instance: 10,000 instances x 100 group names
        were a million translations a DescribeInstances page); a literal value (no `*`,
        `?`, `[`, `\\`) matches exactly its own text, so it is looked up in a set."""
        if not ENABLED:
            return orig_tag_filter_matches(obj, filter_name, filter_values)
        try:
            key = tuple(filter_values)
            entry = regexes_of.get(key)
        except TypeError:
            return _fallback(orig_tag_filter_matches, obj, filter_name, filter_values)
        if entry is None:
            if not all(isinstance(v, str) for v in key):
                return _fallback(orig_tag_filter_matches, obj, filter_name, filter_values)
            import re

            entry = (
                frozenset(key),
                [re.compile(ec2_utils.simple_aws_filter_to_re(v)) for v in key],
                not any(_WILDCARDS & set(v) or "\\" in v for v in key),
            )
            if len(regexes_of) > 1000:
                regexes_of.clear()
            regexes_of[key] = entry
        values, patterns, literal = entry
        if filter_name == "tag-key":
            tag_values = ec2_utils.get_obj_tag_names(obj)
        elif filter_name == "tag-value":
            tag_values = ec2_utils.get_obj_tag_values(obj)
        elif filter_name.startswith("tag:"):
            tag_values = ec2_utils.get_obj_tag_values(obj, key=filter_name[4:])
        else:
            tag_values = [ec2_utils.get_obj_tag(obj, filter_name) or ""]
        answer = False
        for tag_value in tag_values:
            if tag_value in values if literal else (
                any(p.match(tag_value) for p in patterns) or tag_value in values
            ):
                answer = True
                break
        if CHECK:
            expected = orig_tag_filter_matches(obj, filter_name, filter_values)
            with _STATS_LOCK:
                _STATS["checked"] += 1
                if expected != answer:
                    _STATS["mismatches"].append(
                        {"function": "tag_filter_matches", "args": repr((getattr(obj, "id", obj), filter_name, filter_values))[:500],
                         "indexed": answer, "moto": expected}
                    )
        return answer

    ec2_utils.tag_filter_matches = tag_filter_matches
    InstanceBackend.get_instance = get_instance
    InstanceBackend.get_instance_by_id = get_instance_by_id
    InstanceBackend.get_multi_instances_by_id = get_multi_instances_by_id
    InstanceBackend.get_reservations_by_instance_ids = get_reservations_by_instance_ids
    InstanceBackend.all_reservations = all_reservations
    EBSBackend.describe_volumes = describe_volumes
