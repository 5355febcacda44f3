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
use serde::{Deserialize, Serialize};

pub use crate::fleet::{Condition, HEALTH_CONDITIONS};
pub use crate::policy::HealthPolicy;

/// One node of a release, as observed.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct NodeFacts {
    /// `i-...`.
    pub instance_id: String,
    /// When it joined the cluster (the Node's `creationTimestamp`).
    pub joined: DateTime<Utc>,
    /// Since when it is unhealthy, if it is (a failing node condition).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub unhealthy_since: Option<DateTime<Utc>>,
    /// The failing conditions (`Ready`, `KernelReady`, ...), empty when healthy.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
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
        self.tally(reason, min).map(|t| t.rate())
    }

    /// Failures of `reason` of the pod starts, when at least `min` starts were counted.
    fn tally(&self, reason: &str, min: u32) -> Option<Tally> {
        (self.pod_starts >= min.max(1)).then(|| Tally {
            count: self.pod_failures.get(reason).copied().unwrap_or(0),
            of: self.pod_starts,
        })
    }
}

/// How long after joining a node that is not Ready is taken as not Ready *yet* (kubelet
/// registers the Node before it is Ready): such a node is no evidence about its release (a
/// replacement that never becomes Ready is the rotation's replacement timeout's to judge).
pub const NOT_READY_YET: std::time::Duration = std::time::Duration::from_secs(10 * 60);

/// The reason the node lifecycle controller gives a `Ready` condition it set `Unknown`
/// because the kubelet stopped posting status (it had posted before: the node was running).
const KUBELET_STOPPED: &str = "NodeStatusUnknown";

/// What health judges of one node from its conditions: `None` when it is not Ready *yet*
/// (`Ready` not `True` since within [`NOT_READY_YET`] of joining, and not because its kubelet
/// stopped posting status: it never ran); else its facts, unhealthy since the earliest
/// transition of a failing condition (`Ready` not `True`; a monitoring agent condition
/// `False`). A condition without a transition time fails since the node joined.
pub fn node_facts(
    instance_id: &str,
    joined: DateTime<Utc>,
    conditions: &[Condition],
) -> Option<NodeFacts> {
    let not_yet = Duration::from_std(NOT_READY_YET).unwrap_or(Duration::MAX);
    let mut failing = Vec::new();
    let mut since: Option<DateTime<Utc>> = None;
    for c in conditions.iter().filter(|c| c.is_bad()) {
        let at = c.since.unwrap_or(joined);
        if c.kind == "Ready"
            && c.reason.as_deref() != Some(KUBELET_STOPPED)
            && at - joined < not_yet
        {
            return None;
        }
        failing.push(c.kind.clone());
        since = Some(since.map_or(at, |s| s.min(at)));
    }
    Some(NodeFacts {
        instance_id: instance_id.to_string(),
        joined,
        unhealthy_since: since,
        failing,
    })
}

/// The pod start failures counted against a node's release, as reported: a container's
/// `waiting.reason` (`ImagePullBackOff` counts as `ErrImagePull`: a pod alternates between
/// them), or `FailedCreatePodSandBox` (an Event: the pod's status says only
/// `ContainerCreating`). `None` for anything else.
pub fn pod_failure(reason: &str) -> Option<&'static str> {
    Some(match reason {
        "FailedCreatePodSandBox" => "FailedCreatePodSandBox",
        "CreateContainerError" => "CreateContainerError",
        "CreateContainerConfigError" => "CreateContainerConfigError",
        "RunContainerError" => "RunContainerError",
        "ErrImagePull" | "ImagePullBackOff" => "ErrImagePull",
        "CrashLoopBackOff" => "CrashLoopBackOff",
        _ => return None,
    })
}

/// The pods bound to one node: how many started there, and the start failures among them by
/// reason ([`pod_failure`]).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct PodTally {
    /// Pods bound to the node (not `Succeeded`): each is a pod start.
    pub starts: u32,
    /// Those failing to start, by reason.
    pub failures: BTreeMap<String, u32>,
}

/// One node of a pool for [`assess`]: its release, its facts (`None`: not judged, see
/// [`node_facts`]) and its pods (`None`: not counted this pass).
#[derive(Debug, Clone)]
pub struct Observed<'a> {
    /// The release its instance runs.
    pub release: String,
    /// Its node's facts.
    pub node: Option<NodeFacts>,
    /// Its pods.
    pub pods: Option<&'a PodTally>,
}

/// The pool's facts per release, from its nodes.
pub fn by_release(nodes: &[Observed<'_>]) -> BTreeMap<String, ReleaseFacts> {
    let mut out: BTreeMap<String, ReleaseFacts> = BTreeMap::new();
    for n in nodes {
        let facts = out
            .entry(n.release.clone())
            .or_insert_with(|| ReleaseFacts {
                release: n.release.clone(),
                ..ReleaseFacts::default()
            });
        if let Some(node) = &n.node {
            facts.nodes.push(node.clone());
        }
        if let Some(pods) = n.pods {
            facts.pod_starts = facts.pod_starts.saturating_add(pods.starts);
            for (reason, count) in &pods.failures {
                let c = facts.pod_failures.entry(reason.clone()).or_default();
                *c = c.saturating_add(*count);
            }
        }
    }
    out
}

/// What the metrics show of a release under watch: its nodes unhealthy within the window, and
/// the pod start failure rates (all reasons) on its nodes and on the other releases' (`None`:
/// no starts counted).
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Summary {
    /// The release.
    pub release: String,
    /// Its nodes that turned unhealthy within the window.
    pub unhealthy_nodes: u32,
    /// Start failures per pod start on its nodes.
    pub failure_rate_new: Option<f64>,
    /// Start failures per pod start on the other releases' nodes.
    pub failure_rate_old: Option<f64>,
}

/// The [`Summary`] of the pool's `desired` release from `nodes`.
pub fn summarize(desired: &str, nodes: &[Observed<'_>], policy: &HealthPolicy) -> Summary {
    let releases = by_release(nodes);
    let rate = |facts: &mut dyn Iterator<Item = &ReleaseFacts>| {
        let (mut starts, mut failures) = (0u64, 0u64);
        for f in facts {
            starts += u64::from(f.pod_starts);
            failures += f.pod_failures.values().map(|v| u64::from(*v)).sum::<u64>();
        }
        (starts > 0).then(|| failures as f64 / starts as f64)
    };
    let new = releases.get(desired);
    Summary {
        release: desired.to_string(),
        unhealthy_nodes: new.map_or(0, |f| {
            u32::try_from(f.early_unhealthy(policy.window).len()).unwrap_or(u32::MAX)
        }),
        failure_rate_new: rate(&mut new.into_iter()),
        failure_rate_old: rate(
            &mut releases
                .iter()
                .filter(|(r, _)| *r != desired)
                .map(|(_, f)| f),
        ),
    }
}

/// Judges the pool's `desired` release against its nodes on every other release together
/// (the baseline over the same period; `None` when the pool runs nothing else): [`judge`].
pub fn assess(desired: &str, nodes: &[Observed<'_>], policy: &HealthPolicy) -> Verdict {
    let mut releases = by_release(nodes);
    let Some(new) = releases.remove(desired) else {
        return Verdict::Healthy;
    };
    let old = (!releases.is_empty()).then(|| {
        let mut merged = ReleaseFacts {
            release: releases.keys().cloned().collect::<Vec<_>>().join("+"),
            ..ReleaseFacts::default()
        };
        for f in releases.into_values() {
            merged.nodes.extend(f.nodes);
            merged.pod_starts = merged.pod_starts.saturating_add(f.pod_starts);
            for (reason, count) in f.pod_failures {
                let c = merged.pod_failures.entry(reason).or_default();
                *c = c.saturating_add(count);
            }
        }
        merged
    });
    judge(&new, old.as_ref(), policy)
}

/// Whether a pool's release is under watch at `now`: its desired AMI changed from a previous
/// one (`previous`: a first resolution, adopting what the nodes run, is no change) less than
/// `window` ago. Its pods' start failures are read only then.
pub fn under_watch(
    previous: bool,
    changed_at: Option<DateTime<Utc>>,
    window: std::time::Duration,
    now: DateTime<Utc>,
) -> bool {
    let window = Duration::from_std(window).unwrap_or(Duration::MAX);
    previous && changed_at.is_some_and(|t| now - t < window)
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
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum HealthCause {
    /// Its nodes turned unhealthy after joining.
    Unhealthy,
    /// Pods failed on its nodes more than on the previous release's.
    WorkloadFailures,
}

/// `count` of `of` (unhealthy nodes of the release's nodes, or failed pod starts of its
/// starts): a rate kept as the integers it came from, so records compare and round-trip.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct Tally {
    /// How many were bad.
    pub count: u32,
    /// Out of how many.
    pub of: u32,
}

impl Tally {
    fn new(count: usize, of: usize) -> Tally {
        let n = |v: usize| u32::try_from(v).unwrap_or(u32::MAX);
        Tally {
            count: n(count),
            of: n(of),
        }
    }

    /// `count / of` (0 when `of` is 0).
    pub fn rate(&self) -> f64 {
        if self.of == 0 {
            0.0
        } else {
            f64::from(self.count) / f64::from(self.of)
        }
    }
}

/// The evidence against a release, for the quarantine record, `status` and events out.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Indictment {
    /// Which kind of evidence.
    pub cause: HealthCause,
    /// One sentence: what happened, how it compares with the previous release, the threshold.
    pub message: String,
    /// The release.
    pub release: String,
    /// The nodes that turned unhealthy (`Unhealthy`), with their failing conditions.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub nodes: Vec<NodeFacts>,
    /// The failure reason that indicts (`WorkloadFailures`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
    /// The new release's tally (unhealthy nodes of its nodes, or failures of its pod starts).
    pub new: Tally,
    /// The previous release's over the same period, when it has one to compare with.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub old: Option<Tally>,
}

/// The nodes of a release that must turn unhealthy before it is indicted: 3, or all of them
/// when it has fewer.
fn unhealthy_threshold(nodes: usize) -> usize {
    nodes.clamp(1, 3)
}

/// Judges the release of `new` against the previous release's `old` facts (same pool or
/// cluster, same period; `None` when there is none): indicted for unhealthy nodes when at least
/// three of its nodes (all, when it has fewer) turned unhealthy within the window, their share
/// is at least `min_failure_rate` (3 flaky nodes of 1,000 are not a bad release) and more than
/// `max_ratio` times the old release's share; indicted for a pod failure
/// reason when, with at least `min_samples` starts, that reason's rate is at least
/// `min_failure_rate` and more than `max_ratio` times the old release's, which needs
/// `min_samples` old starts too: without that baseline pod failures indict nothing (a
/// registry outage fails every release alike), while unhealthy nodes are judged by their
/// share alone. Unhealthy nodes are judged first; reasons in name order.
pub fn judge(new: &ReleaseFacts, old: Option<&ReleaseFacts>, policy: &HealthPolicy) -> Verdict {
    let bad = new.early_unhealthy(policy.window);
    if !new.nodes.is_empty() && bad.len() >= unhealthy_threshold(new.nodes.len()) {
        let share = |f: &ReleaseFacts| {
            (!f.nodes.is_empty())
                .then(|| Tally::new(f.early_unhealthy(policy.window).len(), f.nodes.len()))
        };
        let new_tally = Tally::new(bad.len(), new.nodes.len());
        let old_tally = old.and_then(share);
        let old_rate = old_tally.map(|t| t.rate());
        if new_tally.rate() >= policy.min_failure_rate
            && above(new_tally.rate(), old_rate, policy.max_ratio)
        {
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
                release: new.release.clone(),
                nodes: bad.into_iter().cloned().collect(),
                reason: None,
                new: new_tally,
                old: old_tally,
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
        // Pod failures without a baseline prove nothing: a registry outage or a bad
        // deployment fails pods on every release alike.
        let Some(old_tally) = old.and_then(|o| o.tally(reason, policy.min_samples)) else {
            continue;
        };
        let old_rate = Some(old_tally.rate());
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
                release: new.release.clone(),
                nodes: Vec::new(),
                reason: Some(reason.clone()),
                new: Tally {
                    count: *failures,
                    of: new.pod_starts,
                },
                old: Some(old_tally),
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
            // 3 of 40 (7.5%) is below the floor: flaky instances, not a bad release.
            (release("v2", 40, 3, 2), None, None),
            (release("v2", 40, 4, 2), None, Some(HealthCause::Unhealthy)),
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
        assert_eq!(
            (i.new, i.old),
            (Tally { count: 3, of: 6 }, Some(Tally { count: 0, of: 6 }))
        );
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
        // No baseline (no previous release, or too few of its starts): pod failures prove
        // nothing.
        let few = pods(release("v1", 6, 0, 0), 19, &[]);
        for baseline in [None, Some(&few)] {
            assert_eq!(judge(&cases[0].0, baseline, &p), Verdict::Healthy);
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

    fn condition(kind: &str, status: &str, reason: Option<&str>, at: i64) -> Condition {
        Condition {
            kind: kind.into(),
            status: status.into(),
            reason: reason.map(Into::into),
            since: Some(t(0) + Duration::minutes(at)),
        }
    }

    #[test]
    fn a_node_is_judged_by_its_conditions_once_it_has_been_ready() {
        // (conditions, minutes after joining) -> judged?, failing conditions.
        let cases: [(Vec<Condition>, Option<Vec<&str>>); 7] = [
            (vec![condition("Ready", "True", None, 1)], Some(vec![])),
            // Registered, not Ready yet: no evidence (the replacement timeout judges it).
            (
                vec![condition("Ready", "False", Some("KubeletNotReady"), 0)],
                None,
            ),
            // The kubelet stopped posting status two hours in (the #2681 pattern).
            (
                vec![condition(
                    "Ready",
                    "Unknown",
                    Some("NodeStatusUnknown"),
                    120,
                )],
                Some(vec!["Ready"]),
            ),
            // Even early: the kubelet had posted, so the node ran.
            (
                vec![condition("Ready", "Unknown", Some("NodeStatusUnknown"), 3)],
                Some(vec!["Ready"]),
            ),
            // NotReady long after joining, posted by the kubelet itself.
            (
                vec![condition("Ready", "False", Some("KubeletNotReady"), 30)],
                Some(vec!["Ready"]),
            ),
            // The monitoring agent's conditions fail when False; others are ignored.
            (
                vec![
                    condition("Ready", "True", None, 1),
                    condition("StorageReady", "False", Some("IOError"), 40),
                    condition("KernelReady", "Unknown", None, 40),
                    condition("MemoryPressure", "True", None, 40),
                ],
                Some(vec!["StorageReady"]),
            ),
            (
                vec![
                    condition("NetworkingReady", "False", None, 50),
                    condition("Ready", "False", Some("KubeletNotReady"), 45),
                ],
                Some(vec!["NetworkingReady", "Ready"]),
            ),
        ];
        for (i, (conditions, want)) in cases.iter().enumerate() {
            let got = node_facts("i-1", t(0), conditions);
            assert_eq!(
                got.as_ref()
                    .map(|f| f.failing.iter().map(String::as_str).collect::<Vec<_>>()),
                want.clone(),
                "case {i}"
            );
        }
        // Unhealthy since the earliest failing transition.
        let f = node_facts("i-1", t(0), &cases[6].0).unwrap_or_else(|| panic!("judged"));
        assert_eq!(f.unhealthy_since, Some(t(0) + Duration::minutes(45)));
    }

    #[test]
    fn pod_failure_reasons_are_the_start_failures_only() {
        for (reason, want) in [
            ("CreateContainerError", Some("CreateContainerError")),
            ("ImagePullBackOff", Some("ErrImagePull")),
            ("ErrImagePull", Some("ErrImagePull")),
            ("CrashLoopBackOff", Some("CrashLoopBackOff")),
            ("FailedCreatePodSandBox", Some("FailedCreatePodSandBox")),
            ("ContainerCreating", None),
            ("PodInitializing", None),
        ] {
            assert_eq!(pod_failure(reason), want, "{reason}");
        }
    }

    #[test]
    fn a_pool_judges_its_desired_release_against_its_other_nodes() {
        let p = HealthPolicy::default();
        let failing = PodTally {
            starts: 5,
            failures: BTreeMap::from([("CreateContainerError".to_string(), 3)]),
        };
        let fine = PodTally {
            starts: 5,
            failures: BTreeMap::new(),
        };
        let node = |r: &str, i: usize, pods: &'static PodTally| Observed {
            release: r.into(),
            node: node_facts(
                &format!("i-{r}-{i}"),
                t(0),
                &[condition("Ready", "True", None, 1)],
            ),
            pods: Some(pods),
        };
        let failing: &'static PodTally = Box::leak(Box::new(failing));
        let fine: &'static PodTally = Box::leak(Box::new(fine));
        let mut nodes: Vec<Observed<'_>> = (0..4).map(|i| node("v2", i, failing)).collect();
        nodes.extend((0..4).map(|i| node("v1", i, fine)));
        let Verdict::Indicted(i) = assess("v2", &nodes, &p) else {
            panic!("indicted");
        };
        assert_eq!(i.cause, HealthCause::WorkloadFailures);
        assert_eq!(
            (i.new, i.old),
            (
                Tally { count: 12, of: 20 },
                Some(Tally { count: 0, of: 20 })
            )
        );
        // The old release failing alike indicts nothing; a release the pool does not run is
        // not judged; nor is the old release by its own failures.
        let alike: Vec<Observed<'_>> = (0..4)
            .map(|i| node("v2", i, failing))
            .chain((0..4).map(|i| node("v1", i, failing)))
            .collect();
        assert_eq!(assess("v2", &alike, &p), Verdict::Healthy);
        assert_eq!(assess("v3", &nodes, &p), Verdict::Healthy);
        assert_eq!(assess("v1", &nodes, &p), Verdict::Healthy);
    }
}
