//! `nodecycle doctor`: a read-only preflight of a deployment, with the operator's credentials.
//!
//! Layers, from pure to I/O:
//! - the check modules ([`contract`], [`scope`], [`table`], [`policies`], [`groups`],
//!   [`access`], [`endpoint`], [`rbac`], [`rules`], [`members`], [`forwarding`]): plain functions from observed facts (or the error reading them) to [`Check`]s;
//! - [`port`] ([`crate::inventory`]): one narrow read-only trait per capability (stack
//!   outputs, table, groups, cluster access, event rules, RBAC, policy documents) and the
//!   plain fact types they return;
//! - [`run`]: [`run::diagnose`] reads through the ports in order and asks the check functions.
//!
//! Adapters live in `crate::aws` (feature `doctor` for CloudFormation and EventBridge) and
//! `crate::kube::rbac`.

use std::fmt;

use serde::Serialize;

use crate::port::{ErrorKind, PortError};

pub mod access;
pub mod contract;
pub mod endpoint;
pub mod forwarding;
pub mod groups;
pub mod members;
#[cfg(any(test, feature = "test-support"))]
pub mod memory;
pub mod policies;
pub mod rbac;
pub mod release;
pub mod rules;
pub mod run;
pub mod scope;
#[cfg(feature = "doctor")]
pub mod spokes;
pub mod table;

/// The ports doctor reads through (they live in [`crate::inventory`], below the adapters).
pub use crate::inventory as port;
#[cfg(test)]
mod tests;

/// The Kubernetes group of each function role that talks to Kubernetes, by the stack output
/// naming the role (access entries map each role to its group; deploy/rbac.yaml binds each
/// group to what its function's code uses).
pub const KUBERNETES_GROUPS: [(&str, &str); 3] = [
    ("RotatorRoleArn", "nodecycle-rotator"),
    ("InterruptionHandlerRoleArn", "nodecycle-interruption"),
    ("OpsRoleArn", "nodecycle-ops"),
];
/// The single group every function role was mapped to before one group per function.
pub const LEGACY_KUBERNETES_GROUP: &str = "nodecycle";

/// The Kubernetes group of the role named by stack output `output` (`None`: a role that does not
/// talk to Kubernetes).
pub fn kubernetes_group(output: &str) -> Option<&'static str> {
    KUBERNETES_GROUPS
        .iter()
        .find(|(o, _)| *o == output)
        .map(|(_, g)| *g)
}
/// Default stack name (`--stack`, `NODECYCLE_STACK`).
pub const DEFAULT_STACK: &str = "nodecycle";
/// Environment variable naming the stack.
pub const STACK_ENV: &str = "NODECYCLE_STACK";

/// Outcome of one check.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub enum Status {
    /// As nodecycle needs it.
    #[serde(rename = "ok")]
    Ok,
    /// Works, but the operator should know (e.g. something nodecycle cannot verify).
    #[serde(rename = "warn")]
    Warn,
    /// nodecycle will not work as configured; `fix` says what to do.
    #[serde(rename = "FAIL")]
    Fail,
}

impl fmt::Display for Status {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.pad(match self {
            Status::Ok => "ok",
            Status::Warn => "warn",
            Status::Fail => "FAIL",
        })
    }
}

/// What was checked: a stable identity (JSON `check`), independent of the message text.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, strum::IntoStaticStr)]
#[serde(rename_all = "camelCase")]
#[strum(serialize_all = "camelCase")]
pub enum CheckKind {
    /// The stack exists and has the contract's outputs.
    Stack,
    /// The state table: keys `pk`/`sk`, TTL on `ttl`.
    Table,
    /// One policy document (or the prefix as a whole).
    Policy,
    /// An EKS cluster the stack serves exists.
    Cluster,
    /// The functions that reach Kubernetes can reach the cluster's API endpoint as it is exposed
    /// (private-only, public limited by `publicAccessCidrs`) from where they run (in a VPC or not).
    Endpoint,
    /// A pool's node group: exists, kind matches `nodeGroup`, tagged.
    Group,
    /// The launch template nodecycle versions for a pool is tagged.
    LaunchTemplate,
    /// A self-managed group's terminate lifecycle hooks use the configured name.
    LifecycleHook,
    /// A self-managed group with nodecycle's terminate hook retains an instance whose drain did
    /// not finish (instance lifecycle policy `TerminateHookAbandon: retain`, hook default
    /// `ABANDON`), and the instances it retains now, with their pods ([`crate::retain`]).
    Retention,
    /// A function role's EKS access entry maps it to its function's Kubernetes group.
    AccessEntry,
    /// The cluster's RBAC grants each function's group every rule deploy/rbac.yaml gives it.
    Rbac,
    /// An EventBridge rule of the stack is enabled.
    EventRule,
    /// A pool's `architecture` runs on its node group's instance types.
    Architecture,
    /// A member's spoke role can be assumed (subject `<account>/<region>`).
    Spoke,
    /// A member forwards an event class to the cell's bus in its region (subject
    /// `<account>/<region>: <detail type>`).
    Forwarding,
    /// A pool's AMIs are not deprecated within the warning horizon, and its pinned EKS release
    /// has builds for the cluster's next Kubernetes minor ([`release`]).
    Release,
    /// The stack's permission scope serves its clusters: with `ClusterNames`, no more than IAM's
    /// inline policy cap takes ([`scope`]).
    Scope,
    /// With `CellClusters`: a cluster, node group, Auto Scaling group or launch template carries
    /// the cell tag `nodecycle.dev/cell=<stack>` the stack's permissions require.
    CellTag,
}

impl CheckKind {
    /// The JSON name (`group`, `launchTemplate`, ...).
    pub fn name(self) -> &'static str {
        self.into()
    }
}

/// One line of the report.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Check {
    /// ok, warn or FAIL.
    pub status: Status,
    /// What kind of thing was checked.
    pub check: CheckKind,
    /// Which one: a stack, table, parameter, pool id, cluster, `<cluster>/<role output>`, rule.
    pub subject: String,
    /// What was found.
    pub detail: String,
    /// What to do (empty when nothing is to be done).
    pub fix: String,
}

impl Check {
    /// A passing check.
    pub fn ok(check: CheckKind, subject: impl Into<String>, detail: impl Into<String>) -> Self {
        Self::new(Status::Ok, check, subject, detail, "")
    }

    /// A warning with what to do.
    pub fn warn(
        check: CheckKind,
        subject: impl Into<String>,
        detail: impl Into<String>,
        fix: impl Into<String>,
    ) -> Self {
        Self::new(Status::Warn, check, subject, detail, fix)
    }

    /// A failure with what to do.
    pub fn fail(
        check: CheckKind,
        subject: impl Into<String>,
        detail: impl Into<String>,
        fix: impl Into<String>,
    ) -> Self {
        Self::new(Status::Fail, check, subject, detail, fix)
    }

    fn new(
        status: Status,
        check: CheckKind,
        subject: impl Into<String>,
        detail: impl Into<String>,
        fix: impl Into<String>,
    ) -> Self {
        Check {
            status,
            check,
            subject: subject.into(),
            detail: detail.into(),
            fix: fix.into(),
        }
    }

    /// The check of something `facts` looked up: `then` of what was found; FAIL with `missing`
    /// (detail, fix) when there is no such thing; [`Check::unreadable`] when it could not be read.
    pub fn if_found<T>(
        facts: Result<Option<T>, PortError>,
        check: CheckKind,
        subject: impl Into<String>,
        missing: (impl Into<String>, impl Into<String>),
        then: impl FnOnce(T) -> Check,
    ) -> Self {
        match facts {
            Ok(Some(found)) => then(found),
            Ok(None) => Self::fail(check, subject, missing.0, missing.1),
            Err(e) => Self::unreadable(check, subject, &e),
        }
    }

    /// A FAIL saying what could not be read and which permission it takes: for access denied,
    /// the IAM action (the port error's operation); otherwise the error and a retry.
    pub fn unreadable(check: CheckKind, subject: impl Into<String>, error: &PortError) -> Self {
        let fix = match error.kind {
            ErrorKind::AccessDenied => format!(
                "grant the operator {} (see docs/reference.md, nodecycle doctor), or run with credentials \
                 that have it",
                error.operation
            ),
            ErrorKind::Transient => "retry; the service was unavailable or throttled".to_owned(),
            _ => format!(
                "check AWS_REGION and the credentials; {} needs read access",
                error.operation
            ),
        };
        Self::fail(check, subject, format!("cannot read: {error}"), fix)
    }
}

impl fmt::Display for Check {
    /// `<status>  <check> <subject>: <detail>  <fix>` (the fix only when there is one).
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{:<4}  {} {}: {}",
            self.status,
            self.check.name(),
            self.subject,
            self.detail
        )?;
        if !self.fix.is_empty() {
            write!(f, "  {}", self.fix)?;
        }
        Ok(())
    }
}

/// Every check, in the order they were made.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct Report {
    /// The checks.
    pub checks: Vec<Check>,
}

impl Report {
    /// How many checks failed.
    pub fn failed(&self) -> usize {
        self.count(Status::Fail)
    }

    /// How many checks have `status`.
    pub fn count(&self, status: Status) -> usize {
        self.checks.iter().filter(|c| c.status == status).count()
    }

    /// The JSON form: `{"checks": [{status, check, subject, detail, fix}], "failed": n}`.
    pub fn to_json(&self) -> serde_json::Value {
        serde_json::json!({
            "checks": self.checks,
            "failed": self.failed(),
        })
    }

    /// Process exit code: 0 when nothing failed, 1 otherwise.
    pub fn exit_code(&self) -> u8 {
        u8::from(self.failed() > 0)
    }
}

#[cfg(test)]
mod unit {
    use super::*;

    #[test]
    fn line_and_json_forms() {
        let c = Check::fail(
            CheckKind::EventRule,
            "nodecycle-tick",
            "DISABLED",
            "aws events enable-rule --name nodecycle-tick",
        );
        assert_eq!(
            c.to_string(),
            "FAIL  eventRule nodecycle-tick: DISABLED  aws events enable-rule --name nodecycle-tick"
        );
        let ok = Check::ok(CheckKind::Table, "t", "keys pk/sk");
        assert_eq!(ok.to_string(), "ok    table t: keys pk/sk");
        let report = Report {
            checks: vec![c, ok],
        };
        let v = report.to_json();
        assert_eq!(v["failed"], 1);
        assert_eq!(v["checks"][0]["status"], "FAIL");
        assert_eq!(v["checks"][0]["check"], "eventRule");
        assert_eq!(v["checks"][1]["status"], "ok");
        assert_eq!(v["checks"][1]["fix"], "");
        assert_eq!(report.exit_code(), 1);
        assert_eq!(Report::default().exit_code(), 0);
    }

    #[test]
    fn kind_names_match_serde() {
        for kind in [
            CheckKind::Stack,
            CheckKind::Table,
            CheckKind::Policy,
            CheckKind::Cluster,
            CheckKind::Group,
            CheckKind::LaunchTemplate,
            CheckKind::LifecycleHook,
            CheckKind::AccessEntry,
            CheckKind::Rbac,
            CheckKind::EventRule,
            CheckKind::Architecture,
            CheckKind::Spoke,
            CheckKind::Forwarding,
            CheckKind::Scope,
            CheckKind::CellTag,
        ] {
            assert_eq!(serde_json::to_value(kind).unwrap(), kind.name());
        }
    }

    #[test]
    fn unreadable_names_the_permission() {
        let e = PortError::new(
            "events:DescribeRule",
            ErrorKind::AccessDenied,
            "AccessDeniedException: no",
        );
        let c = Check::unreadable(CheckKind::EventRule, "r", &e);
        assert_eq!(c.status, Status::Fail);
        assert!(c.fix.contains("events:DescribeRule"));
        assert!(c.detail.contains("AccessDeniedException"));
    }
}
