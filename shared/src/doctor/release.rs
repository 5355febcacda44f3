//! The `release` check of each pool: what the ami-watcher last found ahead of time
//! ([`crate::deprecation::Findings`] in the pool's record): the AMIs it uses that EC2 deprecates
//! within the horizon, and whether its pinned EKS release has builds for the cluster's next
//! Kubernetes minor. Warnings, never failures: nothing is broken yet.

use chrono::{DateTime, Utc};

use super::{Check, CheckKind};
use crate::deprecation::Findings;
use crate::port::PortError;

/// The checks of `pool` from the findings read for it at `now`.
pub fn check(
    pool: &str,
    found: Result<Option<Findings>, PortError>,
    now: DateTime<Utc>,
) -> Vec<Check> {
    let findings = match found {
        Err(e) => return vec![Check::unreadable(CheckKind::Release, pool, &e)],
        Ok(None) => {
            return vec![Check::ok(
                CheckKind::Release,
                pool,
                "nothing recorded yet: the ami-watcher records deprecations and next-minor builds on its next run",
            )];
        }
        Ok(Some(f)) => f,
    };
    let mut out: Vec<Check> = findings
        .deprecating
        .iter()
        .map(|d| {
            Check::warn(
                CheckKind::Release,
                pool,
                d.message(now),
                "move the pool to a release that is not deprecated (amiSelectorTerms, or nodecycle pin), or unpin it",
            )
        })
        .collect();
    match &findings.next_minor {
        Some(n) if n.warns() => out.push(Check::warn(
            CheckKind::Release,
            pool,
            n.message(),
            format!(
                "before upgrading the control plane to {}, pin a release built for it ({}), or move the pool to an @latest alias",
                n.next,
                n.nearest.as_deref().unwrap_or("none published yet")
            ),
        )),
        Some(n) => out.push(Check::ok(CheckKind::Release, pool, n.message())),
        None => {}
    }
    if findings.deprecating.is_empty() {
        out.push(Check::ok(
            CheckKind::Release,
            pool,
            format!(
                "no AMI it uses is deprecated within {} days",
                findings.horizon_days
            ),
        ));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::deprecation::{Deprecating, Use};
    use crate::doctor::Status;
    use crate::upgrade::NextMinor;

    fn at(s: &str) -> DateTime<Utc> {
        DateTime::parse_from_rfc3339(s)
            .map(|t| t.with_timezone(&Utc))
            .unwrap_or_default()
    }

    fn statuses(checks: &[Check]) -> Vec<Status> {
        checks.iter().map(|c| c.status).collect()
    }

    #[test]
    fn each_finding_is_a_warning_and_a_clean_pool_is_ok() {
        let now = at("2026-12-05T00:00:00Z");
        let deprecating = Deprecating {
            ami: "ami-pin".into(),
            name: "golden-7".into(),
            uses: vec![Use::Pinned],
            deprecates_at: at("2026-12-25T00:00:00Z"),
        };
        let missing = NextMinor {
            pinned: "al2023@v20240807".into(),
            current: "1.30".into(),
            next: "1.31".into(),
            missing: vec!["/aws/service/eks/...".into()],
            nearest: Some("al2023@v20241109".into()),
        };
        let both = Findings {
            horizon_days: 30,
            nearest: Some(deprecating.deprecates_at),
            deprecating: vec![deprecating],
            next_minor: Some(missing.clone()),
        };
        let checks = check("prod/general", Ok(Some(both)), now);
        assert_eq!(statuses(&checks), [Status::Warn, Status::Warn]);
        assert!(checks[0].detail.contains("20 day(s)"), "{checks:?}");
        assert!(checks[1].fix.contains("al2023@v20241109"), "{checks:?}");
        let clean = Findings {
            horizon_days: 30,
            next_minor: Some(NextMinor {
                missing: Vec::new(),
                ..missing
            }),
            ..Findings::default()
        };
        assert_eq!(
            statuses(&check("prod/general", Ok(Some(clean)), now)),
            [Status::Ok, Status::Ok]
        );
        assert_eq!(
            statuses(&check("prod/general", Ok(None), now)),
            [Status::Ok]
        );
        let denied = PortError::new(
            "dynamodb:GetItem",
            crate::port::ErrorKind::AccessDenied,
            "no",
        );
        assert_eq!(
            statuses(&check("prod/general", Err(denied), now)),
            [Status::Fail]
        );
    }
}
