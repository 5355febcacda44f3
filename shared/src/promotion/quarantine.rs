//! Quarantine: an image or a release excluded from every pool's candidates, with who, why and
//! when. Stored once for the whole deployment (see [`crate::state::keys`]), read by every pass.

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};

use super::Release;
use super::health::{HealthCause, Indictment};

/// What is quarantined.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub enum Target {
    /// One image id.
    Ami(String),
    /// Every image of a release (alias release version, or image id for other terms).
    Release(Release),
}

impl std::fmt::Display for Target {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Target::Ami(id) => write!(f, "image {id}"),
            Target::Release(r) => write!(f, "release {r}"),
        }
    }
}

/// Why something was quarantined.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "cause", rename_all = "camelCase")]
pub enum Cause {
    /// A rotation's replacement on it never became Ready.
    #[serde(rename_all = "camelCase")]
    ReplacementNotReady {
        /// The pool where it failed.
        pool: String,
        /// The instance that was being replaced.
        instance: String,
    },
    /// A promotion alarm was in ALARM while a pool rolled to it.
    #[serde(rename_all = "camelCase")]
    Alarm {
        /// The pool rolling to it.
        pool: String,
        /// The alarm.
        alarm: String,
    },
    /// An operator (`ops quarantine`).
    #[serde(rename_all = "camelCase")]
    Operator {
        /// The request.
        request_id: String,
    },
    /// Nodes of the release turned unhealthy soon after joining ([`super::health`]).
    #[serde(rename_all = "camelCase")]
    Unhealthy {
        /// The pool where they did.
        pool: String,
        /// The nodes, their conditions and the comparison with the previous release.
        evidence: Indictment,
    },
    /// Pods failed to start on the release's nodes more than on the previous release's
    /// ([`super::health`]).
    #[serde(rename_all = "camelCase")]
    WorkloadFailures {
        /// The pool where they did.
        pool: String,
        /// The reason, the counts and the comparison with the previous release.
        evidence: Indictment,
    },
    /// The publisher withdrew it: a parameter the pools resolve through moved back to an
    /// older image at a higher version ([`super::withdrawal`]).
    #[serde(rename_all = "camelCase")]
    Withdrawn {
        /// The parameter.
        parameter: String,
        /// Its version that moved back.
        version: i64,
        /// The image it left.
        image: String,
        /// The older image it names now.
        back_to: String,
    },
}

impl Cause {
    /// The pool whose observation caused it (`None`: an operator's).
    pub fn pool(&self) -> Option<&str> {
        match self {
            Cause::ReplacementNotReady { pool, .. }
            | Cause::Alarm { pool, .. }
            | Cause::Unhealthy { pool, .. }
            | Cause::WorkloadFailures { pool, .. } => Some(pool),
            Cause::Operator { .. } | Cause::Withdrawn { .. } => None,
        }
    }

    /// The health evidence, for a cause that has it.
    pub fn evidence(&self) -> Option<&Indictment> {
        match self {
            Cause::Unhealthy { evidence, .. } | Cause::WorkloadFailures { evidence, .. } => {
                Some(evidence)
            }
            _ => None,
        }
    }

    /// The cause a health indictment is recorded with.
    pub fn of_indictment(pool: &str, evidence: Indictment) -> Cause {
        let pool = pool.to_string();
        match evidence.cause {
            HealthCause::Unhealthy => Cause::Unhealthy { pool, evidence },
            HealthCause::WorkloadFailures => Cause::WorkloadFailures { pool, evidence },
        }
    }
}

/// One quarantine entry.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Quarantine {
    /// What.
    pub target: Target,
    /// Why, in words.
    pub reason: String,
    /// Who (caller identity, or `nodecycle` for automatic quarantine).
    pub by: String,
    /// When.
    pub at: DateTime<Utc>,
    /// What caused it.
    #[serde(flatten)]
    pub cause: Cause,
    /// Its *AMI Quarantined* event until put on the bus (see [`crate::bus`]).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub outbox: Vec<crate::bus::BusEvent>,
}

/// Every quarantine entry in force.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize)]
#[serde(transparent)]
pub struct Quarantined(pub Vec<Quarantine>);

impl Quarantined {
    /// The entry that excludes image `id` of release `release`, if any.
    pub fn covers(&self, id: &str, release: &Release) -> Option<&Quarantine> {
        self.0.iter().find(|q| match &q.target {
            Target::Ami(a) => a == id,
            Target::Release(r) => r == release,
        })
    }

    /// The entry that excludes release `release` (as a release, or as its image id when the
    /// release is an image id).
    pub fn covers_release(&self, release: &Release) -> Option<&Quarantine> {
        self.0.iter().find(|q| match &q.target {
            Target::Ami(a) => a == release.as_str(),
            Target::Release(r) => r == release,
        })
    }

    /// Quarantined image ids (for releases, only those in `known` images: `(id, release)`).
    pub fn images<'a>(
        &self,
        known: impl IntoIterator<Item = (&'a str, &'a Release)>,
    ) -> std::collections::BTreeSet<String> {
        let mut out: std::collections::BTreeSet<String> = self
            .0
            .iter()
            .filter_map(|q| match &q.target {
                Target::Ami(a) => Some(a.clone()),
                Target::Release(_) => None,
            })
            .collect();
        for (id, release) in known {
            if self.covers(id, release).is_some() {
                out.insert(id.to_string());
            }
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn entry(target: Target) -> Quarantine {
        Quarantine {
            target,
            reason: "test".into(),
            by: "nodecycle".into(),
            at: DateTime::<Utc>::UNIX_EPOCH,
            cause: Cause::Operator {
                request_id: "r".into(),
            },
            outbox: Vec::new(),
        }
    }

    fn release(r: &str) -> Release {
        Release(r.to_string())
    }

    #[test]
    fn targets_read_as_words() {
        assert_eq!(Target::Ami("ami-1".into()).to_string(), "image ami-1");
        assert_eq!(
            Target::Release(release("v20241109")).to_string(),
            "release v20241109"
        );
    }

    /// A quarantine of image `ami-bad` and of release `v20240807`.
    fn bad_image_and_release() -> Quarantined {
        Quarantined(vec![
            entry(Target::Ami("ami-bad".into())),
            entry(Target::Release(release("v20240807"))),
        ])
    }

    #[test]
    fn an_entry_covers_its_image_or_its_release() {
        let q = bad_image_and_release();
        // (image id, its release) -> which entry covers it, by target.
        let cases: [(&str, &str, Option<Target>); 4] = [
            ("ami-bad", "v20241109", Some(Target::Ami("ami-bad".into()))),
            (
                "ami-other",
                "v20240807",
                Some(Target::Release(release("v20240807"))),
            ),
            ("ami-other", "v20241109", None),
            ("ami-other", "ami-other", None),
        ];
        for (id, r, want) in cases {
            assert_eq!(
                q.covers(id, &release(r)).map(|e| e.target.clone()),
                want,
                "{id} of {r}"
            );
        }
    }

    #[test]
    fn a_release_is_covered_as_a_release_or_as_its_image_id() {
        let q = bad_image_and_release();
        let cases: [(&str, Option<Target>); 4] = [
            ("ami-bad", Some(Target::Ami("ami-bad".into()))),
            ("v20240807", Some(Target::Release(release("v20240807")))),
            ("v20241109", None),
            ("ami-other", None),
        ];
        for (r, want) in cases {
            assert_eq!(
                q.covers_release(&release(r)).map(|e| e.target.clone()),
                want,
                "{r}"
            );
        }
    }
}
