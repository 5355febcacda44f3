//! DynamoDB adapter for the [`Store`] port.

use async_trait::async_trait;
use std::collections::HashMap;

use aws_sdk_dynamodb::types::{
    AttributeDefinition, AttributeValue, BillingMode, ConditionCheck, KeySchemaElement, KeyType,
    KeysAndAttributes, Put, ScalarAttributeType, TimeToLiveSpecification, TransactWriteItem,
};
use chrono::{DateTime, Utc};

use super::port_error;
use crate::port::{ErrorKind, PortError};
use crate::state::{BatchRead, DOC, Key, PK, SK, Store, TTL, TxWrite, VERSION, Versioned};

/// The table through the SDK.
#[derive(Clone, Debug)]
pub struct Table {
    client: aws_sdk_dynamodb::Client,
    name: String,
}

impl Table {
    /// Wraps a client for table `name`.
    pub fn new(client: aws_sdk_dynamodb::Client, name: impl Into<String>) -> Self {
        Self {
            client,
            name: name.into(),
        }
    }

    /// The table name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// Creates the table with exactly the definition in template.yaml (for local runs and tests):
    /// `pk`/`sk` string keys, on-demand billing, TTL on `ttl`. Succeeds if it already exists.
    pub async fn create_if_missing(&self) -> Result<(), PortError> {
        let key = |name: &str, kind: KeyType| {
            KeySchemaElement::builder()
                .attribute_name(name)
                .key_type(kind)
                .build()
        };
        let attr = |name: &str| {
            AttributeDefinition::builder()
                .attribute_name(name)
                .attribute_type(ScalarAttributeType::S)
                .build()
        };
        let created = self
            .client
            .create_table()
            .table_name(&self.name)
            .billing_mode(BillingMode::PayPerRequest)
            .key_schema(key(PK, KeyType::Hash).map_err(build_error)?)
            .key_schema(key(SK, KeyType::Range).map_err(build_error)?)
            .attribute_definitions(attr(PK).map_err(build_error)?)
            .attribute_definitions(attr(SK).map_err(build_error)?)
            .send()
            .await;
        match created {
            Ok(_) => {}
            Err(e) => {
                let e = port_error("dynamodb:CreateTable", e);
                if !e.message.starts_with("ResourceInUseException") {
                    return Err(e);
                }
            }
        }
        let ttl = TimeToLiveSpecification::builder()
            .attribute_name(TTL)
            .enabled(true)
            .build()
            .map_err(build_error)?;
        self.client
            .update_time_to_live()
            .table_name(&self.name)
            .time_to_live_specification(ttl)
            .send()
            .await
            .map_err(|e| port_error("dynamodb:UpdateTimeToLive", e))?;
        Ok(())
    }
}

fn build_error(e: aws_sdk_dynamodb::error::BuildError) -> PortError {
    PortError::new("dynamodb", ErrorKind::Other, e.to_string())
}

fn decode(
    item: &std::collections::HashMap<String, AttributeValue>,
) -> Result<Versioned<serde_json::Value>, PortError> {
    let bad = |what: &str| PortError::new("dynamodb:decode", ErrorKind::Other, what.to_string());
    let version = item
        .get(VERSION)
        .and_then(|v| v.as_n().ok())
        .and_then(|n| n.parse::<u64>().ok())
        .ok_or_else(|| bad("item has no numeric `version` attribute"))?;
    let doc = item
        .get(DOC)
        .and_then(|v| v.as_s().ok())
        .ok_or_else(|| bad("item has no string `doc` attribute"))?;
    let value = serde_json::from_str(doc).map_err(|e| bad(&format!("`doc` is not JSON: {e}")))?;
    Ok(Versioned { value, version })
}

/// The condition of a write expecting version `expected` (`None`: the item must not exist):
/// its expression, names and values.
type Condition = (
    &'static str,
    HashMap<String, String>,
    Option<HashMap<String, AttributeValue>>,
);

fn condition(expected: Option<u64>) -> Condition {
    match expected {
        None => (
            "attribute_not_exists(#pk)",
            HashMap::from([("#pk".to_string(), PK.to_string())]),
            None,
        ),
        Some(v) => (
            "#v = :v",
            HashMap::from([("#v".to_string(), VERSION.to_string())]),
            Some(HashMap::from([(
                ":v".to_string(),
                AttributeValue::N(v.to_string()),
            )])),
        ),
    }
}

/// `request` (a PutItem, or a transaction's Put or ConditionCheck: three builders with no common
/// trait) made conditional on the item being at version `expected` ([`condition`]).
macro_rules! expecting {
    ($request:expr, $expected:expr) => {{
        let (expression, names, values) = condition($expected);
        $request
            .condition_expression(expression)
            .set_expression_attribute_names(Some(names))
            .set_expression_attribute_values(values)
    }};
}

/// The attributes of an item written at version `next` (as [`Store::put`] writes it).
fn attributes(
    pk: &str,
    sk: &str,
    doc: &serde_json::Value,
    next: u64,
    ttl: Option<DateTime<Utc>>,
) -> HashMap<String, AttributeValue> {
    let mut item = HashMap::from([
        (PK.to_string(), AttributeValue::S(pk.to_string())),
        (SK.to_string(), AttributeValue::S(sk.to_string())),
        (VERSION.to_string(), AttributeValue::N(next.to_string())),
        (DOC.to_string(), AttributeValue::S(doc.to_string())),
        (
            "updatedAt".to_string(),
            AttributeValue::S(Utc::now().to_rfc3339()),
        ),
    ]);
    if let Some(t) = ttl {
        item.insert(
            TTL.to_string(),
            AttributeValue::N(t.timestamp().to_string()),
        );
    }
    item
}

fn key_of(item: &HashMap<String, AttributeValue>) -> Option<Key> {
    let s = |name: &str| item.get(name).and_then(|v| v.as_s().ok()).cloned();
    Some((s(PK)?, s(SK)?))
}

/// A cancelled transaction as the port's kinds: a condition that failed or a conflicting
/// transaction is a [`ErrorKind::Conflict`], throttling [`ErrorKind::Throttled`].
fn transact_error(
    op: &str,
    e: aws_sdk_dynamodb::error::SdkError<
        aws_sdk_dynamodb::operation::transact_write_items::TransactWriteItemsError,
        aws_sdk_dynamodb::config::http::HttpResponse,
    >,
) -> PortError {
    use aws_sdk_dynamodb::operation::transact_write_items::TransactWriteItemsError;
    if let Some(TransactWriteItemsError::TransactionCanceledException(c)) = e.as_service_error() {
        let codes: Vec<&str> = c
            .cancellation_reasons()
            .iter()
            .filter_map(|r| r.code())
            .collect();
        let kind = if codes
            .iter()
            .any(|c| matches!(*c, "ConditionalCheckFailed" | "TransactionConflict"))
        {
            ErrorKind::Conflict
        } else if codes.contains(&"ThrottlingError") {
            ErrorKind::Throttled
        } else {
            ErrorKind::Other
        };
        return PortError::new(
            op,
            kind,
            format!(
                "TransactionCanceledException: {} (reasons {codes:?})",
                c.message().unwrap_or("no message")
            ),
        );
    }
    port_error(op, e)
}

#[async_trait]
impl Store for Table {
    async fn backoff(&self, attempt: usize) {
        // 10 ms per attempt plus up to 20 ms of jitter (from the clock: no RNG dependency).
        let jitter = u64::from(
            std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map(|d| d.subsec_nanos())
                .unwrap_or(0)
                % 20,
        );
        let step = u64::try_from(attempt).unwrap_or(8).min(8) * 10;
        tokio::time::sleep(std::time::Duration::from_millis(step + jitter)).await;
    }

    async fn get(
        &self,
        pk: &str,
        sk: &str,
    ) -> Result<Option<Versioned<serde_json::Value>>, PortError> {
        let out = self
            .client
            .get_item()
            .table_name(&self.name)
            .key(PK, AttributeValue::S(pk.to_string()))
            .key(SK, AttributeValue::S(sk.to_string()))
            .consistent_read(true)
            .send()
            .await
            .map_err(|e| port_error("dynamodb:GetItem", e))?;
        out.item().map(decode).transpose()
    }

    async fn put(
        &self,
        pk: &str,
        sk: &str,
        doc: &serde_json::Value,
        expected: Option<u64>,
        ttl: Option<DateTime<Utc>>,
    ) -> Result<u64, PortError> {
        let next = expected.map_or(1, |v| v + 1);
        let put = expecting!(
            self.client
                .put_item()
                .table_name(&self.name)
                .set_item(Some(attributes(pk, sk, doc, next, ttl))),
            expected
        );
        put.send()
            .await
            .map_err(|e| port_error("dynamodb:PutItem", e))?;
        Ok(next)
    }

    async fn batch_get(&self, keys: &[Key]) -> Result<BatchRead, PortError> {
        if keys.is_empty() {
            return Ok(BatchRead::default());
        }
        let mut wanted = KeysAndAttributes::builder().consistent_read(true);
        for (pk, sk) in keys {
            wanted = wanted.keys(HashMap::from([
                (PK.to_string(), AttributeValue::S(pk.clone())),
                (SK.to_string(), AttributeValue::S(sk.clone())),
            ]));
        }
        let out = self
            .client
            .batch_get_item()
            .request_items(&self.name, wanted.build().map_err(build_error)?)
            .send()
            .await
            .map_err(|e| port_error("dynamodb:BatchGetItem", e))?;
        let mut read = BatchRead::default();
        for item in out
            .responses()
            .and_then(|r| r.get(&self.name))
            .into_iter()
            .flatten()
        {
            let key = key_of(item).ok_or_else(|| {
                PortError::new("dynamodb:decode", ErrorKind::Other, "item without its key")
            })?;
            read.items.push((key, decode(item)?));
        }
        read.unprocessed = out
            .unprocessed_keys()
            .and_then(|u| u.get(&self.name))
            .map(|k| k.keys().iter().filter_map(key_of).collect())
            .unwrap_or_default();
        Ok(read)
    }

    async fn transact(&self, writes: &[TxWrite]) -> Result<(), PortError> {
        let mut items = Vec::with_capacity(writes.len());
        for w in writes {
            let (pk, sk, expected) = w.condition();
            let item = match w.written() {
                Some((pk, sk, doc, next, ttl)) => {
                    let put = Put::builder()
                        .table_name(&self.name)
                        .set_item(Some(attributes(pk, sk, doc, next, ttl)));
                    let put = expecting!(put, expected).build().map_err(build_error)?;
                    TransactWriteItem::builder().put(put).build()
                }
                None => {
                    let check = ConditionCheck::builder()
                        .table_name(&self.name)
                        .key(PK, AttributeValue::S(pk.to_string()))
                        .key(SK, AttributeValue::S(sk.to_string()));
                    let check = expecting!(check, expected).build().map_err(build_error)?;
                    TransactWriteItem::builder().condition_check(check).build()
                }
            };
            items.push(item);
        }
        self.client
            .transact_write_items()
            .set_transact_items(Some(items))
            .send()
            .await
            .map_err(|e| transact_error("dynamodb:TransactWriteItems", e))?;
        Ok(())
    }

    async fn query(
        &self,
        pk: &str,
        sk_prefix: &str,
    ) -> Result<Vec<(String, Versioned<serde_json::Value>)>, PortError> {
        // An empty prefix is the whole partition (DynamoDB refuses an empty `begins_with`, and
        // names or values the condition does not use).
        let mut names = std::collections::HashMap::from([("#pk".to_string(), PK.to_string())]);
        let mut values = std::collections::HashMap::from([(
            ":pk".to_string(),
            AttributeValue::S(pk.to_string()),
        )]);
        let condition = if sk_prefix.is_empty() {
            "#pk = :pk"
        } else {
            names.insert("#sk".to_string(), SK.to_string());
            values.insert(":p".to_string(), AttributeValue::S(sk_prefix.to_string()));
            "#pk = :pk AND begins_with(#sk, :p)"
        };
        let mut pages = self
            .client
            .query()
            .table_name(&self.name)
            .key_condition_expression(condition)
            .set_expression_attribute_names(Some(names))
            .set_expression_attribute_values(Some(values))
            .consistent_read(true)
            .into_paginator()
            .items()
            .send();
        let mut out = Vec::new();
        while let Some(item) = pages.next().await {
            let item = item.map_err(|e| port_error("dynamodb:Query", e))?;
            let sk = item
                .get(SK)
                .and_then(|v| v.as_s().ok())
                .cloned()
                .unwrap_or_default();
            out.push((sk, decode(&item)?));
        }
        Ok(out)
    }
}
