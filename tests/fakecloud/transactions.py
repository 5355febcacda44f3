"""TransactWriteItems without a copy of the whole table per call.

moto backs up every table a transaction names with ``copy.deepcopy`` before it writes, and
restores the copies when any operation fails: the cost of a transaction grows with the table
(at 500 pools x 100 nodes a moving pass spent most of the fake cloud's CPU there), while
DynamoDB's does not. This patch keeps moto's own transaction code (same checks, same errors,
same cancellation reasons) and replaces only the backup: the items the transaction names are
copied before it runs and put back (or removed, if they did not exist) when moto cancels it.
Items the transaction does not name are never touched, so a concurrent writer's change to
another item survives a cancelled transaction, as on DynamoDB (moto's table restore lost it).

Writes are atomic, as DynamoDB's are: moto checks a write's condition and then writes, in
Python, while the server answers requests on several threads, so two conditional puts of the
same new item (`attribute_not_exists`) could both pass their check and both "win" (seen as two
deliveries of one interruption event both claiming it, under load). Every write of the backend
(PutItem, UpdateItem, DeleteItem, BatchWriteItem, TransactWriteItems) runs under one lock.
"""

from __future__ import annotations

import copy
import threading
from typing import Any

_WRITES = threading.RLock()


class _NoTableCopy:
    """``copy`` as moto's DynamoDB backend module sees it: a table is not copied (this patch
    backs up the named items instead); everything else is copied as before."""

    def __getattr__(self, name: str) -> Any:
        return getattr(copy, name)

    @staticmethod
    def deepcopy(value: Any, memo: Any = None) -> Any:
        from moto.dynamodb.models.table import Table

        if isinstance(value, Table):
            return value
        return copy.deepcopy(value, memo)


def _named_items(backend: Any, transact_items: list[dict[str, Any]]) -> list[tuple[Any, Any, Any, Any]]:
    """(table, hash value, range value, copy of the item or None) for each item named."""
    from moto.dynamodb.models.dynamo_type import DynamoType

    out = []
    for entry in transact_items:
        try:
            _, op = next(iter(entry.items()))
            table = backend.tables.get(op.get("TableName"))
            if table is None:
                continue
            attrs = op.get("Key") or op.get("Item") or {}
            hash_value = DynamoType(attrs[table.hash_key_attr])
            range_value = (
                DynamoType(attrs[table.range_key_attr]) if table.range_key_attr else None
            )
        except (KeyError, TypeError, StopIteration, AttributeError):
            continue  # moto refuses the malformed request itself
        current = table.get_item(hash_value, range_value)
        out.append((table, hash_value, range_value, copy.deepcopy(current)))
    return out


def _restore(named: list[tuple[Any, Any, Any, Any]]) -> None:
    for table, hash_value, range_value, before in reversed(named):
        if range_value is None:
            if before is None:
                table.items.pop(hash_value, None)
            else:
                table.items[hash_value] = before
        else:
            rows = table.items[hash_value]
            if before is None:
                rows.pop(range_value, None)
                if not rows:
                    table.items.pop(hash_value, None)
            else:
                rows[range_value] = before


def apply_patches() -> None:
    import moto.dynamodb.models as models
    from moto.dynamodb.models import DynamoDBBackend

    models.copy = _NoTableCopy()
    original = DynamoDBBackend.transact_write_items

    def transact_write_items(self: Any, transact_items: list[dict[str, Any]]) -> None:
        named = _named_items(self, transact_items) if len(transact_items) <= 100 else []
        try:
            original(self, transact_items)
        except Exception:
            _restore(named)
            raise

    DynamoDBBackend.transact_write_items = transact_write_items

    def atomic(write):
        def locked(self: Any, *args: Any, **kwargs: Any) -> Any:
            with _WRITES:
                return write(self, *args, **kwargs)

        locked.__wrapped__ = write
        return locked

    for name in ("put_item", "update_item", "delete_item", "batch_write_item", "transact_write_items"):
        original_write = getattr(DynamoDBBackend, name, None)
        if original_write is not None:
            setattr(DynamoDBBackend, name, atomic(original_write))
