//! DynamoDB adapter for the [`Store`] port.

use async_trait::async_trait;
use aws_sdk_dynamodb::types::{
    AttributeDefinition, AttributeValue, BillingMode, KeySchemaElement, KeyType,
    ScalarAttributeType, TimeToLiveSpecification,
};
use chrono::{DateTime, Utc};

use super::port_error;
use crate::port::{ErrorKind, PortError};
use crate::state::{DOC, PK, SK, Store, TTL, VERSION, Versioned};

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
        let mut req = self
            .client
            .put_item()
            .table_name(&self.name)
            .item(PK, AttributeValue::S(pk.to_string()))
            .item(SK, AttributeValue::S(sk.to_string()))
            .item(VERSION, AttributeValue::N(next.to_string()))
            .item(DOC, AttributeValue::S(doc.to_string()))
            .item("updatedAt", AttributeValue::S(Utc::now().to_rfc3339()));
        if let Some(t) = ttl {
            req = req.item(TTL, AttributeValue::N(t.timestamp().to_string()));
        }
        req = match expected {
            None => req
                .condition_expression("attribute_not_exists(#pk)")
                .expression_attribute_names("#pk", PK),
            Some(v) => req
                .condition_expression("#v = :v")
                .expression_attribute_names("#v", VERSION)
                .expression_attribute_values(":v", AttributeValue::N(v.to_string())),
        };
        req.send()
            .await
            .map_err(|e| port_error("dynamodb:PutItem", e))?;
        Ok(next)
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
