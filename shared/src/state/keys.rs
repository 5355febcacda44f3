//! Every key format of the state table, and nowhere else. Items already in users' tables are
//! read by these same formats: changing one is a migration.
//!
//! | partition (`pk`) | sort key (`sk`) | item |
//! |---|---|---|
//! | `POOL#<pool>` | `STATE` | the pool record ([`super::PoolRecord`]) |
//! | `POOL#<pool>` | `ROT#<instance>` | a rotation ([`crate::rotation::Rotation`]) |
//! | `POOL#<pool>` | `MNGUPDATE` | the managed node group update ([`crate::managed::ManagedUpdate`]) |
//! | `POOL#<pool>` | `CLAIM#<instance>#<kind>` | an interruption handler claim |
//! | `POOL#<pool>` | `LCA#<instance>` | a lifecycle action handed over to the rotator |
//! | `POOL#<pool>` | `EVT#<time>#<instance>[#<tail>]` | the interruption event log |
//! | `POOL#<pool>` | `REQ#rotate#<hash>` | an `ops rotate` request, for repeats |
//! | `POOL#<pool>`, `AUDIT`, `QUARANTINE`, `DEPLOYMENT` | `AUDIT#<time>#<request id>` | an ops audit record |
//! | `LEASE#<name>` | `LEASE` | a lease ([`super::Lease`]) |
//! | `QUARANTINE` | `Q#AMI#<id>`, `Q#REL#<release>` | a quarantine ([`crate::promotion::Quarantine`]) |
//! | `DEPLOYMENT` | `STOP` | the stop switch ([`crate::stop::StopSwitch`]) |
//! | `PARAMETER` | `P#<name>` | the newest version seen of a parameter the pools resolve through ([`super::SeenParameter`]) |
//! | `EVENT#<event id>` | `EVENT` | the claim of one EventBridge event id |

use chrono::{DateTime, SecondsFormat, Utc};

use crate::promotion::Target;

/// Partition key of a pool's items.
pub fn pool_pk(pool: &str) -> String {
    format!("POOL#{pool}")
}

/// Sort key of a pool's state record.
pub const POOL_STATE_SK: &str = "STATE";

/// Sort key prefix of a pool's rotation items.
pub const ROTATION_PREFIX: &str = "ROT#";

/// Sort key of a rotation item under the pool's partition.
pub fn rotation_sk(instance_id: &str) -> String {
    format!("{ROTATION_PREFIX}{instance_id}")
}

/// Sort key of a pool's managed node group update record.
pub const UPDATE_SK: &str = "MNGUPDATE";

/// Partition key of lease `name`.
pub fn lease_pk(name: &str) -> String {
    format!("LEASE#{name}")
}

/// Sort key of a lease.
pub const LEASE_SK: &str = "LEASE";

/// Partition of the quarantine items.
pub const QUARANTINE_PK: &str = "QUARANTINE";

/// Sort key prefix of the quarantine items.
pub const QUARANTINE_PREFIX: &str = "Q#";

/// Sort key of the quarantine item of `target` (also part of its event's id).
pub fn quarantine_sk(target: &Target) -> String {
    match target {
        Target::Ami(id) => format!("{QUARANTINE_PREFIX}AMI#{id}"),
        Target::Release(r) => format!("{QUARANTINE_PREFIX}REL#{r}"),
    }
}

/// Partition of the parameters seen (release withdrawals).
pub const PARAMETER_PK: &str = "PARAMETER";

/// Sort key prefix of a parameter seen.
pub const PARAMETER_PREFIX: &str = "P#";

/// Sort key of parameter `name`.
pub fn parameter_sk(name: &str) -> String {
    format!("{PARAMETER_PREFIX}{name}")
}

/// Partition of the deployment-wide items (the stop switch and its audit records).
pub const DEPLOYMENT_PK: &str = "DEPLOYMENT";

/// Sort key of the stop switch.
pub const STOP_SK: &str = "STOP";

/// Partition of the audit records of requests that name no pool nodecycle manages: refused at
/// parsing, or naming an unknown pool (never a partition named after hostile input).
pub const AUDIT_PK: &str = "AUDIT";

/// Sort key prefix of audit records.
pub const AUDIT_PREFIX: &str = "AUDIT#";

/// Sort key of the audit record of request `request_id` received at `at`.
pub fn audit_sk(at: DateTime<Utc>, request_id: &str) -> String {
    format!(
        "{AUDIT_PREFIX}{}#{request_id}",
        at.to_rfc3339_opts(SecondsFormat::Millis, true)
    )
}

/// Sort key of the record of an `ops rotate` request whose parameters hash to `hash`.
pub fn rotate_request_sk(hash: u64) -> String {
    format!("REQ#rotate#{hash:016x}")
}

/// Sort key of the claim of `kind` work on `instance` (pool partition).
pub fn claim_sk(instance: &str, kind: &str) -> String {
    format!("CLAIM#{instance}#{kind}")
}

/// Partition key of the claim of EventBridge event `id`.
pub fn event_claim_pk(id: &str) -> String {
    format!("EVENT#{id}")
}

/// Sort key of the claim of an EventBridge event id.
pub const EVENT_CLAIM_SK: &str = "EVENT";

/// Sort key prefix of the lifecycle actions handed to the rotator (pool partition).
pub const LIFECYCLE_PREFIX: &str = "LCA#";

/// Sort key of an open lifecycle action handed to the rotator (pool partition).
pub fn lifecycle_sk(instance: &str) -> String {
    format!("{LIFECYCLE_PREFIX}{instance}")
}

/// Sort key prefix of the interruption event log (pool partition).
pub const EVENT_LOG_PREFIX: &str = "EVT#";

/// Sort key of an event log entry about `instance` at `time` (seconds).
pub fn event_sk(time: DateTime<Utc>, instance: &str) -> String {
    format!(
        "{EVENT_LOG_PREFIX}{}#{instance}",
        time.to_rfc3339_opts(SecondsFormat::Secs, true)
    )
}
