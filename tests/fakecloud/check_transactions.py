"""Self-check of transactions.py: a cancelled TransactWriteItems leaves every item it named as
it was (an overwritten item back, a created one gone) and the rest of the table untouched; a
completed one writes all of its items. Run: python tests/fakecloud/check_transactions.py"""

import os
import sys

os.environ.setdefault("AWS_DEFAULT_REGION", "us-east-1")
os.environ.setdefault("AWS_ACCESS_KEY_ID", "testing")
os.environ.setdefault("AWS_SECRET_ACCESS_KEY", "testing")
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import boto3  # noqa: E402
from moto import mock_aws  # noqa: E402

import transactions  # noqa: E402


def item(pk, sk, v=None):
    out = {"pk": {"S": pk}, "sk": {"S": sk}}
    if v is not None:
        out["v"] = {"N": str(v)}
    return out


def rows(c):
    return sorted(
        (i["pk"]["S"], i["sk"]["S"], i.get("v", {}).get("N")) for i in c.scan(TableName="t")["Items"]
    )


def main() -> None:
    transactions.apply_patches()
    with mock_aws():
        c = boto3.client("dynamodb")
        c.create_table(
            TableName="t",
            KeySchema=[{"AttributeName": "pk", "KeyType": "HASH"}, {"AttributeName": "sk", "KeyType": "RANGE"}],
            AttributeDefinitions=[{"AttributeName": "pk", "AttributeType": "S"}, {"AttributeName": "sk", "AttributeType": "S"}],
            BillingMode="PAY_PER_REQUEST",
        )
        c.put_item(TableName="t", Item=item("a", "1", 1))
        c.put_item(TableName="t", Item=item("z", "1", 9))
        try:
            c.transact_write_items(
                TransactItems=[
                    {"Put": {"TableName": "t", "Item": item("a", "1", 2)}},
                    {"Put": {"TableName": "t", "Item": item("b", "1", 2)}},
                    {"Put": {"TableName": "t", "Item": item("c", "1"), "ConditionExpression": "attribute_exists(pk)"}},
                ]
            )
            raise SystemExit("FAIL: a transaction whose condition fails was not cancelled")
        except c.exceptions.TransactionCanceledException as e:
            codes = [r.get("Code") for r in e.response["CancellationReasons"]]
            assert codes == ["None", "None", "ConditionalCheckFailed"], codes
        assert rows(c) == [("a", "1", "1"), ("z", "1", "9")], rows(c)
        print("ok  a cancelled transaction leaves the items it named as they were, the others untouched")
        c.transact_write_items(
            TransactItems=[
                {
                    "Put": {
                        "TableName": "t",
                        "Item": item("a", "1", 3),
                        "ConditionExpression": "v = :one",
                        "ExpressionAttributeValues": {":one": {"N": "1"}},
                    }
                },
                {"Put": {"TableName": "t", "Item": item("b", "2", 3)}},
            ]
        )
        assert rows(c) == [("a", "1", "3"), ("b", "2", "3"), ("z", "1", "9")], rows(c)
        got = c.query(
            TableName="t",
            KeyConditionExpression="pk = :b",
            ExpressionAttributeValues={":b": {"S": "b"}},
            ConsistentRead=True,
        )["Count"]
        assert got == 1, got
        print("ok  a completed transaction writes every item it names")


if __name__ == "__main__":
    main()
