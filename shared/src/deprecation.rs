//! Warnings before an AMI bites (pure): EC2 deprecates public EKS AMIs two years after they are
//! created, and a deprecated AMI a pool is pinned to stops scale-out; a pinned release may have no
//! build for the cluster's next Kubernetes minor ([`crate::upgrade`]). The ami-watcher gathers
//! the facts each run and records [`Findings`] in the pool record; `status`, `plan` and `doctor` show them, the
//! `DaysToDeprecation` metric carries the nearest deprecation, and *AMI Deprecating* is put once
//! per pool, AMI and horizon ([`announce_key`]).

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};

use crate::ami::select::Image;

/// Default warning horizon: AMIs deprecating within this many days are warned about
/// (`NODECYCLE_DEPRECATION_WARNING` on the ami-watcher).
pub const DEFAULT_HORIZON_DAYS: i64 = 30;

/// At most this many AMIs are listed per pool (the nearest deprecations first).
pub const LIMIT: usize = 10;

/// How a pool uses an AMI.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub enum Use {
    /// What its nodes should run (the terms' resolution).
    Desired,
    /// What an operator pinned it to.
    Pinned,
    /// What some of its nodes run now.
    Running,
}

/// An AMI a pool uses that deprecates within the horizon (or already has).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Deprecating {
    /// `ami-...`.
    pub ami: String,
    /// Its name.
    pub name: String,
    /// How the pool uses it.
    pub uses: Vec<Use>,
    /// Its EC2 `DeprecationTime`.
    pub deprecates_at: DateTime<Utc>,
}

impl Deprecating {
    /// Whole days from `now` to its deprecation (negative once past).
    pub fn days_left(&self, now: DateTime<Utc>) -> i64 {
        (self.deprecates_at - now).num_days()
    }

    /// One sentence for people.
    pub fn message(&self, now: DateTime<Utc>) -> String {
        let uses: Vec<&str> = self
            .uses
            .iter()
            .map(|u| match u {
                Use::Desired => "desired",
                Use::Pinned => "pinned",
                Use::Running => "running on nodes",
            })
            .collect();
        let when = self
            .deprecates_at
            .to_rfc3339_opts(chrono::SecondsFormat::Secs, true);
        let days = self.days_left(now);
        let tail = if days < 0 || self.deprecates_at <= now {
            format!(
                "was deprecated at {when}: new instances cannot be launched from it by name, and a pin to it stops scale-out once it is"
            )
        } else {
            format!(
                "is deprecated at {when}, in {days} day(s): move the pool to a newer release before then"
            )
        };
        format!(
            "AMI {} ({}), {}, {tail}",
            self.ami,
            self.name,
            uses.join(" and ")
        )
    }
}

/// What the ami-watcher last found about a pool's AMIs, as recorded in its pool record.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Findings {
    /// The horizon it warned from, in days.
    pub horizon_days: i64,
    /// The nearest deprecation among every AMI the pool uses (whether within the horizon or
    /// not): the `DaysToDeprecation` metric. `None` when none has a deprecation time.
    pub nearest: Option<DateTime<Utc>>,
    /// The AMIs deprecating within the horizon, nearest first (at most [`LIMIT`]).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub deprecating: Vec<Deprecating>,
    /// Whether the pinned release has a build for the next Kubernetes minor (pools pinned to
    /// an EKS release only).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub next_minor: Option<crate::upgrade::NextMinor>,
}

impl Findings {
    /// Every warning, one sentence each.
    pub fn warnings(&self, now: DateTime<Utc>) -> Vec<String> {
        let mut out: Vec<String> = self.deprecating.iter().map(|d| d.message(now)).collect();
        if let Some(n) = self.next_minor.as_ref().filter(|n| n.warns()) {
            out.push(n.message());
        }
        out
    }
}

/// The AMIs of `images` (each with how the pool uses it) deprecating at or before
/// `now + horizon`, each once with all its uses, nearest first, at most [`LIMIT`]; and the
/// nearest deprecation of them all.
pub fn deprecating(
    images: &[(Use, Image)],
    horizon_days: i64,
    now: DateTime<Utc>,
) -> (Vec<Deprecating>, Option<DateTime<Utc>>) {
    let mut by_ami: std::collections::BTreeMap<&str, Deprecating> =
        std::collections::BTreeMap::new();
    for (u, image) in images {
        let Some(at) = image.deprecation_time else {
            continue;
        };
        let entry = by_ami
            .entry(image.id.as_str())
            .or_insert_with(|| Deprecating {
                ami: image.id.clone(),
                name: image.name.clone(),
                uses: Vec::new(),
                deprecates_at: at,
            });
        if !entry.uses.contains(u) {
            entry.uses.push(*u);
            entry.uses.sort();
        }
    }
    let nearest = by_ami.values().map(|d| d.deprecates_at).min();
    let limit = now + chrono::Duration::days(horizon_days);
    let mut out: Vec<Deprecating> = by_ami
        .into_values()
        .filter(|d| d.deprecates_at <= limit)
        .collect();
    out.sort_by(|a, b| {
        a.deprecates_at
            .cmp(&b.deprecates_at)
            .then_with(|| a.ami.cmp(&b.ami))
    });
    out.truncate(LIMIT);
    (out, nearest)
}

/// The key under which *AMI Deprecating* for `ami` at `horizon_days` is announced once per pool.
pub fn announce_key(ami: &str, horizon_days: i64) -> String {
    format!("{ami}@{horizon_days}d")
}

/// Whole days from `now` to `at` (negative once past): the `DaysToDeprecation` value.
pub fn days_to(at: DateTime<Utc>, now: DateTime<Utc>) -> i64 {
    (at - now).num_days()
}

#[cfg(test)]
mod tests;
