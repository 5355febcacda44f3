//! Evidence about a release from what its nodes and pods do over time, compared with the
//! release before it (pure). Ready is not proof: the bad releases of 2026 stalled hours after
//! Ready (a kubelet that stops posting status) or broke only some images (containers that
//! cannot be created). So a release is judged by
//!
//! - its **nodes**: one that turns unhealthy (a node condition such as `Ready` or the EKS node
//!   monitoring agent's `KernelReady` failing) within [`HealthPolicy::window`] of joining is
//!   evidence against the release;
//! - its **pods**: start failures on its nodes (`CreateContainerError`, `ErrImagePull`, ...)
//!   per pod start, reason by reason;
//!
//! each compared with the previous release's nodes and pods over the same period: a signal that
//! hits old and new alike (a registry outage, a bad deployment, a flaky instance type) indicts
//! nothing. [`judge`] answers with a [`Verdict`]; [`soaked`] says whether a release has been
//! healthy long enough, on enough nodes, to be proven.

use std::collections::BTreeMap;

use chrono::{DateTime, Duration, Utc};
use serde::Serialize;

pub use crate::policy::HealthPolicy;

/// One node of a release, as observed.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct NodeFacts {
    /// `i-...`.
    pub instance_id: String,
    /// When it first became Ready.
    pub joined: DateTime<Utc>,
    /// Since when it is unhealthy, if it is (a failing node condition).
    pub unhealthy_since: Option<DateTime<Utc>>,
    /// The failing conditions (`Ready`, `KernelReady`, ...), empty when healthy.
    pub failing: Vec<String>,
}

/// What one release's nodes and pods did in a pool (or cluster) over one period.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct ReleaseFacts {
    /// The release (`v20241109`, `1.26.0`, or an image id).
    pub release: String,
    /// Its nodes.
    pub nodes: Vec<NodeFacts>,
    /// Pod starts counted on its nodes.
    pub pod_starts: u32,
    /// Pod start failures on its nodes, by reason (`CreateContainerError`, `ErrImagePull`,
    /// `CrashLoopBackOff`, ...).
    pub pod_failures: BTreeMap<String, u32>,
}

impl ReleaseFacts {
    /// The nodes that turned unhealthy within `window` of joining.
    fn early_unhealthy(&self, window: std::time::Duration) -> Vec<&NodeFacts> {
        let window = Duration::from_std(window).unwrap_or(Duration::MAX);
        self.nodes
            .iter()
            .filter(|n| n.unhealthy_since.is_some_and(|t| t - n.joined <= window))
            .collect()
    }

    /// The failure rate of `reason` per pod start, when at least `min` starts were counted.
    fn rate(&self, reason: &str, min: u32) -> Option<f64> {
        (self.pod_starts >= min.max(1)).then(|| {
            f64::from(self.pod_failures.get(reason).copied().unwrap_or(0))
                / f64::from(self.pod_starts)
        })
    }
}

/// What the evidence says of a release.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(tag = "verdict", rename_all = "camelCase")]
pub enum Verdict {
    /// Nothing against it.
    Healthy,
    /// Against it: quarantine, halt its rollout, roll back, un-prove.
    Indicted(Indictment),
}

/// Why a release is indicted.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub enum HealthCause {
    /// Its nodes turned unhealthy after joining.
    Unhealthy,
    /// Pods failed on its nodes more than on the previous release's.
    WorkloadFailures,
}

/// The evidence against a release, for the quarantine record, `status` and events out.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Indictment {
    /// Which kind of evidence.
    pub cause: HealthCause,
    /// One sentence: what happened, how it compares with the previous release, the threshold.
    pub message: String,
    /// The nodes that turned unhealthy (`Unhealthy`), with their failing conditions.
    pub nodes: Vec<NodeFacts>,
    /// The failure reason that indicts (`WorkloadFailures`).
    pub reason: Option<String>,
    /// The new release's rate (unhealthy nodes per node, or failures per pod start).
    pub new_rate: f64,
    /// The previous release's rate over the same period, when it has one.
    pub old_rate: Option<f64>,
}

/// The nodes of a release that must turn unhealthy before it is indicted: 3, or all of them
/// when it has fewer.
fn unhealthy_threshold(nodes: usize) -> usize {
    nodes.clamp(1, 3)
}

/// Judges the release of `new` against the previous release's `old` facts (same pool or
/// cluster, same period; `None` when there is none): indicted for unhealthy nodes when at least
/// three of its nodes (all, when it has fewer) turned unhealthy within the window and their
/// share is more than `max_ratio` times the old release's share; indicted for a pod failure
/// reason when, with at least `min_samples` starts, that reason's rate is at least
/// `min_failure_rate` and more than `max_ratio` times the old release's (with `min_samples`
/// old starts; without a baseline the absolute rate alone decides). Unhealthy nodes are
/// judged first; reasons in name order.
pub fn judge(new: &ReleaseFacts, old: Option<&ReleaseFacts>, policy: &HealthPolicy) -> Verdict {
    let bad = new.early_unhealthy(policy.window);
    if !new.nodes.is_empty() && bad.len() >= unhealthy_threshold(new.nodes.len()) {
        let share = |f: &ReleaseFacts| {
            (!f.nodes.is_empty())
                .then(|| f.early_unhealthy(policy.window).len() as f64 / f.nodes.len() as f64)
        };
        let new_rate = bad.len() as f64 / new.nodes.len() as f64;
        let old_rate = old.and_then(share);
        if above(new_rate, old_rate, policy.max_ratio) {
            return Verdict::Indicted(Indictment {
                cause: HealthCause::Unhealthy,
                message: format!(
                    "{} of {} nodes on {} turned unhealthy within {} of joining ({}){}",
                    bad.len(),
                    new.nodes.len(),
                    new.release,
                    crate::duration::format(policy.window),
                    bad.iter()
                        .map(|n| format!("{}: {}", n.instance_id, n.failing.join(", ")))
                        .collect::<Vec<_>>()
                        .join("; "),
                    compared(old, old_rate, policy.max_ratio, "of its nodes")
                ),
                nodes: bad.into_iter().cloned().collect(),
                reason: None,
                new_rate,
                old_rate,
            });
        }
    }
    for (reason, failures) in &new.pod_failures {
        let Some(new_rate) = new.rate(reason, policy.min_samples) else {
            continue;
        };
        if new_rate < policy.min_failure_rate {
            continue;
        }
        let old_rate = old.and_then(|o| o.rate(reason, policy.min_samples));
        if above(new_rate, old_rate, policy.max_ratio) {
            return Verdict::Indicted(Indictment {
                cause: HealthCause::WorkloadFailures,
                message: format!(
                    "{failures} of {} pod starts on {} nodes failed with {reason} ({:.0}%){}",
                    new.pod_starts,
                    new.release,
                    new_rate * 100.0,
                    compared(old, old_rate, policy.max_ratio, "of its pod starts")
                ),
                nodes: Vec::new(),
                reason: Some(reason.clone()),
                new_rate,
                old_rate,
            });
        }
    }
    Verdict::Healthy
}

/// `new` is more than `max_ratio` times `old` (any positive rate is, without a baseline or
/// over a baseline of 0).
fn above(new: f64, old: Option<f64>, max_ratio: f64) -> bool {
    match old {
        None => new > 0.0,
        Some(old) => new > old * max_ratio,
    }
}

/// How the rate compares with the previous release, for the message.
fn compared(old: Option<&ReleaseFacts>, rate: Option<f64>, max_ratio: f64, of: &str) -> String {
    match (old, rate) {
        (Some(o), Some(r)) => format!(
            "; the previous release {} had {:.0}% {of} (more than {max_ratio}x indicts)",
            o.release,
            r * 100.0
        ),
        (Some(o), None) => format!(
            "; the previous release {} has too few samples to compare with",
            o.release
        ),
        (None, _) => "; no previous release to compare with".to_string(),
    }
}

/// Whether the release of `facts` is proven in its pool at `now`: at least `soak_nodes` of its
/// nodes (default: 3, or all of the pool's when it has fewer) joined at least `soak` ago and are
/// healthy. `Err` says what is missing.
pub fn soaked(
    facts: &ReleaseFacts,
    soak: std::time::Duration,
    soak_nodes: Option<u32>,
    pool_size: u32,
    now: DateTime<Utc>,
) -> Result<(), String> {
    let needed = soak_nodes.unwrap_or_else(|| pool_size.clamp(1, 3));
    let soak_d = Duration::from_std(soak).unwrap_or(Duration::MAX);
    let proven = facts
        .nodes
        .iter()
        .filter(|n| n.unhealthy_since.is_none() && now - n.joined >= soak_d)
        .count();
    if u32::try_from(proven).unwrap_or(u32::MAX) >= needed {
        Ok(())
    } else {
        Err(format!(
            "{proven} of the {needed} nodes needed on {} have been healthy for {}",
            facts.release,
            crate::duration::format(soak)
        ))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn t(h: i64) -> DateTime<Utc> {
        DateTime::parse_from_rfc3339("2026-12-05T00:00:00Z")
            .map(|d| d.with_timezone(&Utc))
            .unwrap_or_default()
            + Duration::hours(h)
    }

    /// `n` nodes joined at hour 0, the first `bad` of them unhealthy since `at` hours.
    fn release(name: &str, n: usize, bad: usize, at: i64) -> ReleaseFacts {
        ReleaseFacts {
            release: name.into(),
            nodes: (0..n)
                .map(|i| NodeFacts {
                    instance_id: format!("i-{name}-{i}"),
                    joined: t(0),
                    unhealthy_since: (i < bad).then(|| t(at)),
                    failing: if i < bad {
                        vec!["Ready".into()]
                    } else {
                        vec![]
                    },
                })
                .collect(),
            ..ReleaseFacts::default()
        }
    }

    fn pods(mut r: ReleaseFacts, starts: u32, failures: &[(&str, u32)]) -> ReleaseFacts {
        r.pod_starts = starts;
        r.pod_failures = failures
            .iter()
            .map(|(k, v)| ((*k).to_string(), *v))
            .collect();
        r
    }

    fn cause(v: &Verdict) -> Option<HealthCause> {
        match v {
            Verdict::Indicted(i) => Some(i.cause),
            Verdict::Healthy => None,
        }
    }

    #[test]
    fn nodes_that_stall_after_ready_indict_the_release_unless_the_old_one_stalls_alike() {
        let p = HealthPolicy::default();
        let old = release("v1", 6, 0, 0);
        let cases = [
            // The #2681 pattern: 3 of 6 turn NotReady two hours after Ready.
            (
                release("v2", 6, 3, 2),
                Some(&old),
                Some(HealthCause::Unhealthy),
            ),
            // Two are not enough (one node can be a bad instance).
            (release("v2", 6, 2, 2), Some(&old), None),
            // A pool of 2: both.
            (
                release("v2", 2, 2, 2),
                Some(&old),
                Some(HealthCause::Unhealthy),
            ),
            // After the window: repair, not evidence.
            (release("v2", 6, 3, 25), Some(&old), None),
            // No previous release: the share alone.
            (release("v2", 6, 3, 2), None, Some(HealthCause::Unhealthy)),
        ];
        for (i, (new, old, want)) in cases.iter().enumerate() {
            assert_eq!(cause(&judge(new, *old, &p)), *want, "case {i}");
        }
        // Old nodes failing alike (a bad instance type, a zone outage) indict nothing.
        let old_alike = release("v1", 6, 3, 2);
        assert_eq!(
            judge(&release("v2", 6, 3, 2), Some(&old_alike), &p),
            Verdict::Healthy
        );
        // The indictment names the nodes and their conditions.
        let Verdict::Indicted(i) = judge(&release("v2", 6, 3, 2), Some(&old), &p) else {
            panic!("not indicted");
        };
        assert_eq!(i.nodes.len(), 3);
        assert!(
            i.message.contains("3 of 6 nodes on v2") && i.message.contains("i-v2-0: Ready"),
            "{}",
            i.message
        );
        assert_eq!((i.new_rate, i.old_rate), (0.5, Some(0.0)));
    }

    #[test]
    fn pod_failures_indict_only_when_the_new_release_fails_more_than_the_old() {
        let p = HealthPolicy::default();
        let old = pods(release("v1", 6, 0, 0), 40, &[("ErrImagePull", 8)]);
        let cases = [
            // The #2682 pattern: CreateContainerError on v2 only, 20 starts counted.
            (
                pods(release("v2", 6, 0, 0), 20, &[("CreateContainerError", 12)]),
                Some(HealthCause::WorkloadFailures),
            ),
            // Too few starts yet.
            (
                pods(release("v2", 6, 0, 0), 19, &[("CreateContainerError", 12)]),
                None,
            ),
            // ErrImagePull as often on v1 and v2: a registry problem, not the release.
            (
                pods(release("v2", 6, 0, 0), 40, &[("ErrImagePull", 9)]),
                None,
            ),
            // Below the floor: 1 in 20 is noise, even over a baseline of 0.
            (
                pods(release("v2", 6, 0, 0), 20, &[("CreateContainerError", 1)]),
                None,
            ),
        ];
        for (i, (new, want)) in cases.iter().enumerate() {
            assert_eq!(cause(&judge(new, Some(&old), &p)), *want, "case {i}");
        }
        let Verdict::Indicted(i) = judge(&cases[0].0, Some(&old), &p) else {
            panic!("not indicted");
        };
        assert_eq!(i.reason.as_deref(), Some("CreateContainerError"));
        assert!(
            i.message.contains("12 of 20 pod starts on v2") && i.message.contains("60%"),
            "{}",
            i.message
        );
    }

    #[test]
    fn a_release_is_soaked_when_enough_nodes_stayed_healthy_long_enough() {
        let soak = std::time::Duration::from_secs(2 * 3600);
        let healthy = release("v2", 6, 0, 0);
        assert!(soaked(&healthy, soak, None, 6, t(2)).is_ok());
        assert!(soaked(&healthy, soak, None, 6, t(1)).is_err());
        // 4 of 6 unhealthy: 2 healthy nodes are fewer than the 3 needed.
        let e = soaked(&release("v2", 6, 4, 1), soak, None, 6, t(3))
            .err()
            .unwrap_or_default();
        assert!(e.contains("2 of the 3 nodes needed on v2"), "{e}");
        // A pool of 1 needs its one node; soakNodes overrides.
        assert!(soaked(&release("v2", 1, 0, 0), soak, None, 1, t(2)).is_ok());
        assert!(soaked(&healthy, soak, Some(6), 6, t(2)).is_ok());
        assert!(soaked(&release("v2", 6, 1, 1), soak, Some(6), 6, t(2)).is_err());
    }
}
