//! The state table: string keys `pk` (HASH) / `sk` (RANGE), TTL enabled on `ttl`.

use super::port::TableFacts;
use super::{Check, CheckKind};
use crate::port::PortError;

/// What nodecycle's table must look like: the repository's key attributes.
pub const KEYS: [(&str, &str); 2] = [(crate::state::PK, "HASH"), (crate::state::SK, "RANGE")];
/// The TTL attribute the repository writes.
pub const TTL_ATTRIBUTE: &str = crate::state::TTL;

/// One `table` check from what DynamoDB said about `name`.
pub fn check(name: &str, facts: Result<Option<TableFacts>, PortError>) -> Check {
    let missing = (
        "no such DynamoDB table",
        "the stack's StateTable is gone: update or redeploy the stack (check AWS_REGION)",
    );
    Check::if_found(facts, CheckKind::Table, name, missing, |facts| {
        let mut problems = Vec::new();
        let keys: Vec<(&str, &str)> = facts
            .keys
            .iter()
            .map(|(a, k)| (a.as_str(), k.as_str()))
            .collect();
        if keys != KEYS {
            let shown: Vec<String> = keys.iter().map(|(a, k)| format!("{a} ({k})")).collect();
            problems.push(format!(
                "key schema is [{}], expected [pk (HASH), sk (RANGE)]",
                shown.join(", ")
            ));
        }
        for (attr, _) in KEYS {
            match facts.attribute_types.get(attr).map(String::as_str) {
                Some("S") | None => {}
                Some(other) => problems.push(format!("key {attr} is of type {other}, expected S")),
            }
        }
        let ttl_on = matches!(facts.ttl_status.as_str(), "ENABLED" | "ENABLING");
        if !ttl_on || facts.ttl_attribute.as_deref() != Some(TTL_ATTRIBUTE) {
            problems.push(format!(
                "TTL is {} on {}, expected ENABLED on {TTL_ATTRIBUTE} (leases, event records and \
             audit records never expire otherwise)",
                if facts.ttl_status.is_empty() {
                    "DISABLED"
                } else {
                    &facts.ttl_status
                },
                facts.ttl_attribute.as_deref().unwrap_or("no attribute"),
            ));
        }
        if !problems.is_empty() {
            let fix = if keys == KEYS {
                format!(
                    "aws dynamodb update-time-to-live --table-name {name} --time-to-live-specification \
                 Enabled=true,AttributeName={TTL_ATTRIBUTE}"
                )
            } else {
                "the table is not nodecycle's: point StateTableName at the stack's own table (redeploy)"
                .to_owned()
            };
            return Check::fail(CheckKind::Table, name, problems.join("; "), fix);
        }
        if facts.status != "ACTIVE" {
            return Check::warn(
                CheckKind::Table,
                name,
                format!(
                    "keys pk/sk and TTL on ttl, but the table is {}",
                    facts.status
                ),
                "wait until it is ACTIVE",
            );
        }
        Check::ok(
            CheckKind::Table,
            name,
            "keys pk (HASH) / sk (RANGE), TTL enabled on ttl",
        )
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::doctor::Status;

    fn good() -> TableFacts {
        TableFacts {
            status: "ACTIVE".into(),
            keys: vec![("pk".into(), "HASH".into()), ("sk".into(), "RANGE".into())],
            attribute_types: [("pk".into(), "S".into()), ("sk".into(), "S".into())].into(),
            ttl_status: "ENABLED".into(),
            ttl_attribute: Some("ttl".into()),
        }
    }

    #[test]
    fn table_cases() {
        let cases: Vec<(&str, TableFacts, Status)> = vec![
            ("good", good(), Status::Ok),
            (
                "ttl disabled",
                TableFacts {
                    ttl_status: "DISABLED".into(),
                    ttl_attribute: None,
                    ..good()
                },
                Status::Fail,
            ),
            (
                "ttl on another attribute",
                TableFacts {
                    ttl_attribute: Some("expires".into()),
                    ..good()
                },
                Status::Fail,
            ),
            (
                "ttl enabling",
                TableFacts {
                    ttl_status: "ENABLING".into(),
                    ..good()
                },
                Status::Ok,
            ),
            (
                "hash only",
                TableFacts {
                    keys: vec![("pk".into(), "HASH".into())],
                    ..good()
                },
                Status::Fail,
            ),
            (
                "swapped keys",
                TableFacts {
                    keys: vec![("sk".into(), "HASH".into()), ("pk".into(), "RANGE".into())],
                    ..good()
                },
                Status::Fail,
            ),
            (
                "numeric sk",
                TableFacts {
                    attribute_types: [("pk".into(), "S".into()), ("sk".into(), "N".into())].into(),
                    ..good()
                },
                Status::Fail,
            ),
            (
                "updating",
                TableFacts {
                    status: "UPDATING".into(),
                    ..good()
                },
                Status::Warn,
            ),
        ];
        for (what, facts, expected) in cases {
            let c = check("t", Ok(Some(facts)));
            assert_eq!(c.status, expected, "{what}: {c}");
            assert_eq!(c.check, CheckKind::Table);
        }
        assert_eq!(check("t", Ok(None)).status, Status::Fail);
    }

    #[test]
    fn ttl_fix_is_the_command() {
        let c = check(
            "t",
            Ok(Some(TableFacts {
                ttl_status: "DISABLED".into(),
                ..good()
            })),
        );
        assert!(c.fix.starts_with("aws dynamodb update-time-to-live"));
    }
}
