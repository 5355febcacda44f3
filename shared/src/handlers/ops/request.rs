//! Operator requests (pure): parsing and validation of the JSON the `ops` function takes.
//! Field names are a stable interface. Every problem of a request is reported at once, one
//! per field, in document order of the checks (action, pool, then the action's fields, then
//! unknown fields).

use serde_json::{Map, Value};

use crate::policy::PoolId;
use crate::problem::{quote, shorten};
use crate::promotion::{Release, Target as Quarantined};

/// Longest `reason`, in bytes (it is written to the audit record and to pool records).
pub const MAX_REASON_BYTES: usize = 1024;
/// Most instances one `rotate` may list.
pub const MAX_INSTANCES: usize = 1000;

/// Actions, in the order error messages list them: the [`Request`] variants' names.
pub const ACTIONS: &[&str] = <Request as strum::VariantNames>::VARIANTS;

/// Default `maxConcurrent` of an `ignoreBudgets` rotation.
pub const DEFAULT_MAX_CONCURRENT: u32 = 1;
/// Largest `maxConcurrent` accepted.
pub const MAX_CONCURRENT_LIMIT: u32 = 100;

/// Which nodes a `rotate` targets.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Target {
    /// These instances (unique, in request order).
    Instances(Vec<String>),
    /// Every in-service instance of the pool at request time.
    All,
}

/// A valid request. Its variants' names, lowercased, are the actions ([`ACTIONS`],
/// [`Request::action`]).
#[derive(Debug, Clone, PartialEq, Eq, strum::IntoStaticStr, strum::VariantNames)]
#[strum(serialize_all = "lowercase")]
pub enum Request {
    /// What is happening to one pool's nodes (or every pool's) and why.
    Status {
        /// `<cluster>/<name>`; `None` = every pool.
        pool: Option<String>,
    },
    /// Queue manual rotations.
    Rotate {
        /// `<cluster>/<name>`.
        pool: String,
        /// Which nodes.
        target: Target,
        /// Why (audited).
        reason: String,
        /// Start without waiting for budgets.
        ignore_budgets: bool,
        /// With `ignore_budgets`: at most this many in flight.
        max_concurrent: u32,
    },
    /// Override the desired AMI.
    Pin {
        /// `<cluster>/<name>`.
        pool: String,
        /// `ami-...`.
        ami: String,
        /// Why.
        reason: String,
    },
    /// Remove the override.
    Unpin {
        /// `<cluster>/<name>`.
        pool: String,
        /// Why.
        reason: String,
    },
    /// Start no voluntary rotation.
    Pause {
        /// `<cluster>/<name>`.
        pool: String,
        /// Why.
        reason: String,
    },
    /// Clear a pause and a halt.
    Resume {
        /// `<cluster>/<name>`.
        pool: String,
        /// Why.
        reason: String,
    },
    /// Abort one rotation that has not reached `Terminating`.
    Cancel {
        /// `<cluster>/<name>`.
        pool: String,
        /// `i-...`.
        instance: String,
        /// Why.
        reason: String,
    },
    /// Exclude an image or a release from every pool's candidates (pools whose desired AMI it
    /// is roll back).
    Quarantine {
        /// The image (`ami`) or release (`release`; a release that is an image id is that image).
        target: Quarantined,
        /// Why.
        reason: String,
    },
    /// Lift a quarantine.
    Unquarantine {
        /// As for `quarantine`.
        target: Quarantined,
        /// Why.
        reason: String,
    },
    /// A release's journey through the promotion chains (read-only).
    Promotion {
        /// Alias release version (`v20241109`, `1.26.0`) or image id.
        release: Release,
    },
    /// Whether a pool's rollout reached what a pipeline waits for (read-only; what
    /// `nodecycle wait` checks, on the published status: [`crate::rollout::judge`]).
    Rollout {
        /// `<cluster>/<name>`; `None` = every pool.
        pool: Option<String>,
        /// The release it must be on (image id, name, release version or pinned alias).
        release: Option<String>,
        /// How many nodes must be up to date and Ready (default all).
        min_ready: crate::rollout::MinReady,
    },
    /// Turn the deployment's stop switch on: every pool holds (see [`crate::stop`]).
    Stop {
        /// Why.
        reason: String,
    },
    /// Turn the stop switch off: pools not paused of their own go on.
    Start {
        /// Why.
        reason: String,
    },
}

impl Request {
    /// The action name.
    pub fn action(&self) -> &'static str {
        self.into()
    }

    /// The pool a per-pool mutating request is about (`None` for `status`, `promotion` and the
    /// deployment-wide `quarantine`/`unquarantine`/`stop`/`start`).
    pub fn pool(&self) -> Option<&str> {
        match self {
            Request::Status { .. }
            | Request::Stop { .. }
            | Request::Start { .. }
            | Request::Quarantine { .. }
            | Request::Unquarantine { .. }
            | Request::Promotion { .. }
            | Request::Rollout { .. } => None,
            Request::Rotate { pool, .. }
            | Request::Pin { pool, .. }
            | Request::Unpin { pool, .. }
            | Request::Pause { pool, .. }
            | Request::Resume { pool, .. }
            | Request::Cancel { pool, .. } => Some(pool),
        }
    }
}

fn fields_of(action: &str) -> &'static [&'static str] {
    match action {
        "status" => &["action", "pool"],
        "rotate" => &[
            "action",
            "pool",
            "instances",
            "all",
            "reason",
            "ignoreBudgets",
            "maxConcurrent",
        ],
        "pin" => &["action", "pool", "ami", "reason"],
        "cancel" => &["action", "pool", "instance", "reason"],
        "quarantine" | "unquarantine" => &["action", "ami", "release", "reason"],
        "promotion" => &["action", "release"],
        "rollout" => &["action", "pool", "release", "minReady"],
        "stop" | "start" => &["action", "reason"],
        _ => &["action", "pool", "reason"],
    }
}

/// `i-` and 8 or 17 lowercase hex digits.
pub fn is_instance_id(s: &str) -> bool {
    id_with(s, "i-")
}

/// `ami-` and 8 or 17 lowercase hex digits.
pub fn is_ami_id(s: &str) -> bool {
    id_with(s, "ami-")
}

fn id_with(s: &str, prefix: &str) -> bool {
    s.strip_prefix(prefix).is_some_and(|hex| {
        (hex.len() == 8 || hex.len() == 17)
            && hex
                .chars()
                .all(|c| c.is_ascii_digit() || ('a'..='f').contains(&c))
    })
}

/// An alias release version: `v` and 8 digits (AL2023, AL2: `v20241109`) or `x.y.z`
/// (Bottlerocket: `1.26.0`).
pub fn is_release_version(s: &str) -> bool {
    let digits = |p: &str| !p.is_empty() && p.len() <= 6 && p.chars().all(|c| c.is_ascii_digit());
    match s.strip_prefix('v') {
        Some(d) => d.len() == 8 && d.chars().all(|c| c.is_ascii_digit()),
        None => {
            let parts: Vec<&str> = s.split('.').collect();
            parts.len() == 3 && parts.iter().all(|p| digits(p))
        }
    }
}

const RELEASE_FORMS: &str =
    "v20241109 for AL2023/AL2, 1.26.0 for Bottlerocket, or an image id ami-...";

struct Fields<'a> {
    obj: &'a Map<String, Value>,
    problems: Vec<String>,
}

impl Fields<'_> {
    fn string(&mut self, name: &str) -> Option<String> {
        match self.obj.get(name) {
            None | Some(Value::Null) => None,
            Some(Value::String(s)) => Some(s.clone()),
            Some(_) => {
                self.problems.push(format!("{name}: expected a string"));
                None
            }
        }
    }

    fn boolean(&mut self, name: &str) -> Option<bool> {
        match self.obj.get(name) {
            None | Some(Value::Null) => None,
            Some(Value::Bool(b)) => Some(*b),
            Some(_) => {
                self.problems
                    .push(format!("{name}: expected true or false"));
                None
            }
        }
    }

    /// The string field `name` through `check` (`Err`: the problem, added as
    /// `<name>: <problem>`). Absent (or null): `None`, with the problem `<name>: <missing>`
    /// unless `missing` is `None` (the field is optional here).
    fn checked<T>(
        &mut self,
        name: &str,
        missing: Option<&str>,
        check: impl FnOnce(String) -> Result<T, String>,
    ) -> Option<T> {
        let present = self.present(name);
        match self.string(name) {
            Some(v) => match check(v) {
                Ok(t) => Some(t),
                Err(why) => {
                    self.problems.push(format!("{name}: {why}"));
                    None
                }
            },
            None => {
                if let Some(missing) = missing.filter(|_| !present) {
                    self.problems.push(format!("{name}: {missing}"));
                }
                None
            }
        }
    }

    fn pool(&mut self, required: bool) -> Option<String> {
        let missing = required.then_some("required (\"<cluster>/<name>\")");
        self.checked("pool", missing, |p| match PoolId::parse(&p) {
            Ok(_) => Ok(p),
            Err(_) if !p.contains('/') => {
                Err(format!("expected \"<cluster>/<name>\", got {}", quote(&p)))
            }
            Err(why) => Err(format!(
                "expected \"<cluster>/<name>\", got {} ({why})",
                quote(&p)
            )),
        })
    }

    fn reason(&mut self) -> Option<String> {
        let missing = "required; say why (it is written to the audit record)";
        self.checked("reason", Some(missing), |r| {
            let r = r.trim();
            if r.len() > MAX_REASON_BYTES {
                Err(format!(
                    "{} bytes; expected at most {MAX_REASON_BYTES} (a short why: it is written to the audit record)",
                    r.len()
                ))
            } else if r.is_empty() {
                Err("empty; say why (it is written to the audit record)".to_string())
            } else {
                Ok(r.to_string())
            }
        })
    }

    fn instance(&mut self, name: &str) -> Option<String> {
        self.checked(name, Some("required (i-...)"), |i| {
            if is_instance_id(&i) {
                Ok(i)
            } else {
                Err(format!("{} is not an instance id (i-...)", quote(&i)))
            }
        })
    }

    /// `ami`: an image id.
    fn ami(&mut self, required: bool) -> Option<String> {
        self.checked("ami", required.then_some("required (ami-...)"), |a| {
            if is_ami_id(&a) {
                Ok(a)
            } else {
                Err(format!("{} is not an AMI id (ami-...)", quote(&a)))
            }
        })
    }

    fn target(&mut self) -> Option<Target> {
        let all = self.boolean("all");
        let instances = match self.obj.get("instances") {
            None | Some(Value::Null) => None,
            Some(Value::Array(items)) if items.is_empty() => {
                self.problems
                    .push("instances: empty; list instance ids or use \"all\": true".to_string());
                Some(None)
            }
            Some(Value::Array(items)) if items.len() > MAX_INSTANCES => {
                self.problems.push(format!(
                    "instances: {} listed; expected at most {MAX_INSTANCES} (or \"all\": true)",
                    items.len()
                ));
                Some(None)
            }
            Some(Value::Array(items)) => {
                let mut ids: Vec<String> = Vec::new();
                let mut ok = true;
                for (i, item) in items.iter().enumerate() {
                    match item.as_str() {
                        Some(id) if !is_instance_id(id) => {
                            self.problems.push(format!(
                                "instances[{i}]: {} is not an instance id (i-...)",
                                quote(id)
                            ));
                            ok = false;
                        }
                        Some(id) if ids.iter().any(|x| x == id) => {
                            self.problems
                                .push(format!("instances[{i}]: {id} is listed twice"));
                            ok = false;
                        }
                        Some(id) => ids.push(id.to_string()),
                        None => {
                            self.problems
                                .push(format!("instances[{i}]: expected a string (i-...)"));
                            ok = false;
                        }
                    }
                }
                Some(ok.then_some(ids))
            }
            Some(_) => {
                self.problems
                    .push("instances: expected a list of instance ids".to_string());
                Some(None)
            }
        };
        match (instances, all) {
            (Some(_), Some(true)) => {
                self.problems
                    .push("instances, all: give one of them, not both".to_string());
                None
            }
            (Some(ids), _) => ids.map(Target::Instances),
            (None, Some(true)) => Some(Target::All),
            (None, _) => {
                self.problems.push(
                    "instances: required (a list of instance ids), or \"all\": true".to_string(),
                );
                None
            }
        }
    }

    fn present(&self, name: &str) -> bool {
        self.obj.get(name).is_some_and(|v| !v.is_null())
    }

    /// `release`: an alias release version or an image id.
    fn release(&mut self, required: bool) -> Option<Release> {
        let missing = required.then(|| format!("required ({RELEASE_FORMS})"));
        self.checked("release", missing.as_deref(), |r| {
            if is_release_version(&r) || is_ami_id(&r) {
                Ok(Release(r))
            } else {
                Err(format!("{} is not a release ({RELEASE_FORMS})", quote(&r)))
            }
        })
    }

    /// Exactly one of `ami` and `release`; a release that is an image id is that image.
    fn quarantine_target(&mut self) -> Option<Quarantined> {
        let (has_ami, has_release) = (self.present("ami"), self.present("release"));
        let ami = self.ami(false);
        let release = self.release(false);
        match (has_ami, has_release) {
            (true, true) => {
                self.problems
                    .push("ami, release: give one of them, not both".to_string());
                None
            }
            (false, false) => {
                self.problems.push(format!(
                    "ami, release: required; give one (an image id ami-..., or a release: {RELEASE_FORMS})"
                ));
                None
            }
            _ => match (ami, release) {
                (Some(a), _) => Some(Quarantined::Ami(a)),
                (_, Some(r)) if r.is_image() => Some(Quarantined::Ami(r.0)),
                (_, Some(r)) => Some(Quarantined::Release(r)),
                _ => None,
            },
        }
    }

    fn max_concurrent(&mut self, ignore_budgets: bool) -> Option<u32> {
        match self.obj.get("maxConcurrent") {
            None | Some(Value::Null) => Some(DEFAULT_MAX_CONCURRENT),
            Some(v) => {
                let n = v
                    .as_u64()
                    .and_then(|n| u32::try_from(n).ok())
                    .filter(|n| (1..=MAX_CONCURRENT_LIMIT).contains(n));
                match n {
                    None => {
                        self.problems.push(format!(
                            "maxConcurrent: expected a whole number from 1 to {MAX_CONCURRENT_LIMIT}, got {}",
                            shorten(&v.to_string())
                        ));
                        None
                    }
                    Some(_) if !ignore_budgets => {
                        self.problems.push(
                            "maxConcurrent: only applies with \"ignoreBudgets\": true (budgets bound the others)"
                                .to_string(),
                        );
                        None
                    }
                    n => n,
                }
            }
        }
    }
}

/// Parses and validates one request. `Err` lists every problem (one sentence each, starting
/// with the field it is about).
pub fn parse(payload: &Value) -> Result<Request, Vec<String>> {
    let Some(obj) = payload.as_object() else {
        return Err(vec![format!(
            "request: expected a JSON object with an \"action\" ({})",
            ACTIONS.join(", ")
        )]);
    };
    let mut f = Fields {
        obj,
        problems: Vec::new(),
    };
    let action = match obj.get("action") {
        None | Some(Value::Null) => {
            f.problems
                .push(format!("action: required ({})", ACTIONS.join(", ")));
            None
        }
        Some(Value::String(a)) if ACTIONS.contains(&a.as_str()) => Some(a.as_str()),
        Some(Value::String(a)) => {
            f.problems.push(format!(
                "action: unknown {} (expected one of {})",
                quote(a),
                ACTIONS.join(", ")
            ));
            None
        }
        Some(_) => {
            f.problems.push(format!(
                "action: expected a string ({})",
                ACTIONS.join(", ")
            ));
            None
        }
    };
    let Some(action) = action else {
        return Err(f.problems);
    };
    let request = match action {
        "status" => f
            .pool(false)
            .map(|p| Request::Status { pool: Some(p) })
            .or(obj
                .get("pool")
                .is_none_or(|v| v.is_null())
                .then_some(Request::Status { pool: None })),
        "rotate" => {
            let pool = f.pool(true);
            let target = f.target();
            let reason = f.reason();
            let ignore_budgets = f.boolean("ignoreBudgets");
            let max_concurrent = f.max_concurrent(ignore_budgets.unwrap_or(false));
            match (pool, target, reason, max_concurrent) {
                (Some(pool), Some(target), Some(reason), Some(max_concurrent)) => {
                    Some(Request::Rotate {
                        pool,
                        target,
                        reason,
                        ignore_budgets: ignore_budgets.unwrap_or(false),
                        max_concurrent,
                    })
                }
                _ => None,
            }
        }
        "pin" => {
            let pool = f.pool(true);
            let ami = f.ami(true);
            let reason = f.reason();
            match (pool, ami, reason) {
                (Some(pool), Some(ami), Some(reason)) => Some(Request::Pin { pool, ami, reason }),
                _ => None,
            }
        }
        "cancel" => {
            let pool = f.pool(true);
            let instance = f.instance("instance");
            let reason = f.reason();
            match (pool, instance, reason) {
                (Some(pool), Some(instance), Some(reason)) => Some(Request::Cancel {
                    pool,
                    instance,
                    reason,
                }),
                _ => None,
            }
        }
        "quarantine" | "unquarantine" => {
            let target = f.quarantine_target();
            let reason = f.reason();
            match (target, reason) {
                (Some(target), Some(reason)) if action == "quarantine" => {
                    Some(Request::Quarantine { target, reason })
                }
                (Some(target), Some(reason)) => Some(Request::Unquarantine { target, reason }),
                _ => None,
            }
        }
        "promotion" => f
            .release(true)
            .map(|release| Request::Promotion { release }),
        "rollout" => {
            let pool_given = obj.get("pool").is_some_and(|v| !v.is_null());
            let pool = f.pool(false);
            let release = f.checked("release", None, |r| {
                if r.is_empty() || r.len() > 256 {
                    Err("expected an image id, image name, release version or pinned alias of 1 to 256 characters".to_string())
                } else {
                    Ok(r)
                }
            });
            let min_ready = f.checked("minReady", None, |m| m.parse::<crate::rollout::MinReady>());
            (pool.is_some() || !pool_given).then_some(Request::Rollout {
                pool,
                release,
                min_ready: min_ready.unwrap_or(crate::rollout::MinReady::All),
            })
        }
        "stop" => f.reason().map(|reason| Request::Stop { reason }),
        "start" => f.reason().map(|reason| Request::Start { reason }),
        other => {
            let pool = f.pool(true);
            let reason = f.reason();
            match (pool, reason) {
                (Some(pool), Some(reason)) => match other {
                    "unpin" => Some(Request::Unpin { pool, reason }),
                    "pause" => Some(Request::Pause { pool, reason }),
                    _ => Some(Request::Resume { pool, reason }),
                },
                _ => None,
            }
        }
    };
    let allowed = fields_of(action);
    for key in obj.keys() {
        // `status` also takes the `account` and `region` filters (read by the handler).
        let filter = action == "status" && matches!(key.as_str(), "account" | "region");
        if !allowed.contains(&key.as_str()) && !filter {
            f.problems.push(format!(
                "{}: not a field of {action} (fields: {})",
                shorten(key),
                allowed.join(", ")
            ));
        }
    }
    match request {
        Some(r) if f.problems.is_empty() => Ok(r),
        _ => Err(f.problems),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    const I1: &str = "i-0123456789abcdef0";
    const I2: &str = "i-0fedcba9876543210";

    /// `action()` names the request as the payload's `action` did, for every action, and the
    /// actions are listed in the order error messages give them.
    #[test]
    fn action_names_are_the_payloads() {
        let payloads = [
            json!({"action": "status"}),
            json!({"action": "rotate", "pool": "prod/general", "all": true, "reason": "r"}),
            json!({"action": "pin", "pool": "prod/general", "ami": "ami-0123456789abcdef0", "reason": "r"}),
            json!({"action": "unpin", "pool": "prod/general", "reason": "r"}),
            json!({"action": "pause", "pool": "prod/general", "reason": "r"}),
            json!({"action": "resume", "pool": "prod/general", "reason": "r"}),
            json!({"action": "cancel", "pool": "prod/general", "instance": I1, "reason": "r"}),
            json!({"action": "quarantine", "ami": "ami-0123456789abcdef0", "reason": "r"}),
            json!({"action": "unquarantine", "ami": "ami-0123456789abcdef0", "reason": "r"}),
            json!({"action": "promotion", "release": "v20241109"}),
            json!({"action": "rollout", "pool": "prod/general", "minReady": "90%"}),
            json!({"action": "stop", "reason": "r"}),
            json!({"action": "start", "reason": "r"}),
        ];
        let mut names = Vec::new();
        for payload in &payloads {
            let request = parse(payload).unwrap_or_else(|p| panic!("{payload}: {p:?}"));
            assert_eq!(request.action(), payload["action"], "{payload}");
            names.push(request.action());
        }
        assert_eq!(
            ACTIONS,
            [
                "status",
                "rotate",
                "pin",
                "unpin",
                "pause",
                "resume",
                "cancel",
                "quarantine",
                "unquarantine",
                "promotion",
                "rollout",
                "stop",
                "start"
            ]
        );
        assert_eq!(names, ACTIONS);
    }

    #[test]
    fn valid_requests() {
        let cases: Vec<(Value, Request)> = vec![
            (json!({"action": "status"}), Request::Status { pool: None }),
            (
                json!({"action": "rollout", "release": "al2023@v20240807", "minReady": "5"}),
                Request::Rollout {
                    pool: None,
                    release: Some("al2023@v20240807".into()),
                    min_ready: crate::rollout::MinReady::Count(5),
                },
            ),
            (
                json!({"action": "status", "pool": "prod/general"}),
                Request::Status {
                    pool: Some("prod/general".into()),
                },
            ),
            (
                json!({"action": "rotate", "pool": "prod/general", "instances": [I1, I2], "reason": " CVE "}),
                Request::Rotate {
                    pool: "prod/general".into(),
                    target: Target::Instances(vec![I1.into(), I2.into()]),
                    reason: "CVE".into(),
                    ignore_budgets: false,
                    max_concurrent: 1,
                },
            ),
            (
                json!({"action": "rotate", "pool": "prod/general", "all": true, "reason": "CVE", "ignoreBudgets": true, "maxConcurrent": 2}),
                Request::Rotate {
                    pool: "prod/general".into(),
                    target: Target::All,
                    reason: "CVE".into(),
                    ignore_budgets: true,
                    max_concurrent: 2,
                },
            ),
            (
                json!({"action": "pin", "pool": "prod/general", "ami": "ami-0123456789abcdef0", "reason": "r"}),
                Request::Pin {
                    pool: "prod/general".into(),
                    ami: "ami-0123456789abcdef0".into(),
                    reason: "r".into(),
                },
            ),
            (
                json!({"action": "unpin", "pool": "prod/general", "reason": "r"}),
                Request::Unpin {
                    pool: "prod/general".into(),
                    reason: "r".into(),
                },
            ),
            (
                json!({"action": "pause", "pool": "prod/general", "reason": "r"}),
                Request::Pause {
                    pool: "prod/general".into(),
                    reason: "r".into(),
                },
            ),
            (
                json!({"action": "resume", "pool": "prod/general", "reason": "r"}),
                Request::Resume {
                    pool: "prod/general".into(),
                    reason: "r".into(),
                },
            ),
            (
                json!({"action": "cancel", "pool": "prod/general", "instance": "i-01234567", "reason": "r"}),
                Request::Cancel {
                    pool: "prod/general".into(),
                    instance: "i-01234567".into(),
                    reason: "r".into(),
                },
            ),
            (
                json!({"action": "quarantine", "ami": "ami-0123456789abcdef0", "reason": " bad "}),
                Request::Quarantine {
                    target: Quarantined::Ami("ami-0123456789abcdef0".into()),
                    reason: "bad".into(),
                },
            ),
            (
                json!({"action": "quarantine", "release": "v20241109", "reason": "r"}),
                Request::Quarantine {
                    target: Quarantined::Release(Release("v20241109".into())),
                    reason: "r".into(),
                },
            ),
            (
                json!({"action": "quarantine", "release": "1.26.0", "ami": null, "reason": "r"}),
                Request::Quarantine {
                    target: Quarantined::Release(Release("1.26.0".into())),
                    reason: "r".into(),
                },
            ),
            // A release that is an image id (pools on non-alias terms) is that image.
            (
                json!({"action": "unquarantine", "release": "ami-01234567", "reason": "r"}),
                Request::Unquarantine {
                    target: Quarantined::Ami("ami-01234567".into()),
                    reason: "r".into(),
                },
            ),
            (
                json!({"action": "unquarantine", "ami": "ami-01234567", "reason": "r"}),
                Request::Unquarantine {
                    target: Quarantined::Ami("ami-01234567".into()),
                    reason: "r".into(),
                },
            ),
            (
                json!({"action": "promotion", "release": "v20241109"}),
                Request::Promotion {
                    release: Release("v20241109".into()),
                },
            ),
            (
                json!({"action": "promotion", "release": "ami-0123456789abcdef0"}),
                Request::Promotion {
                    release: Release("ami-0123456789abcdef0".into()),
                },
            ),
        ];
        for (payload, want) in cases {
            assert_eq!(parse(&payload), Ok(want), "{payload}");
        }
    }

    #[test]
    fn every_invalid_shape_lists_every_problem() {
        let cases: Vec<(Value, Vec<&str>)> = vec![
            (
                json!([]),
                vec![
                    "request: expected a JSON object with an \"action\" (status, rotate, pin, unpin, pause, resume, cancel, quarantine, unquarantine, promotion, rollout, stop, start)",
                ],
            ),
            (
                json!({}),
                vec![
                    "action: required (status, rotate, pin, unpin, pause, resume, cancel, quarantine, unquarantine, promotion, rollout, stop, start)",
                ],
            ),
            (
                json!({"action": 3}),
                vec![
                    "action: expected a string (status, rotate, pin, unpin, pause, resume, cancel, quarantine, unquarantine, promotion, rollout, stop, start)",
                ],
            ),
            (
                json!({"action": "reboot", "pool": "prod/general"}),
                vec![
                    "action: unknown \"reboot\" (expected one of status, rotate, pin, unpin, pause, resume, cancel, quarantine, unquarantine, promotion, rollout, stop, start)",
                ],
            ),
            (
                json!({"action": "status", "pool": "general"}),
                vec!["pool: expected \"<cluster>/<name>\", got \"general\""],
            ),
            (
                json!({"action": "status", "pool": "a/b/c", "verbose": true}),
                vec![
                    "pool: expected \"<cluster>/<name>\", got \"a/b/c\" (name: \"b/c\" contains '/'; expected only letters, digits, '-' and '_')",
                    "verbose: not a field of status (fields: action, pool)",
                ],
            ),
            (
                json!({"action": "rotate"}),
                vec![
                    "pool: required (\"<cluster>/<name>\")",
                    "instances: required (a list of instance ids), or \"all\": true",
                    "reason: required; say why (it is written to the audit record)",
                ],
            ),
            (
                json!({"action": "rotate", "pool": 7, "instances": [], "reason": "  "}),
                vec![
                    "pool: expected a string",
                    "instances: empty; list instance ids or use \"all\": true",
                    "reason: empty; say why (it is written to the audit record)",
                ],
            ),
            (
                json!({"action": "rotate", "pool": "prod/general", "instances": ["node-1", I1, I1, 5], "reason": "r"}),
                vec![
                    "instances[0]: \"node-1\" is not an instance id (i-...)",
                    "instances[2]: i-0123456789abcdef0 is listed twice",
                    "instances[3]: expected a string (i-...)",
                ],
            ),
            (
                json!({"action": "rotate", "pool": "prod/general", "instances": I1, "reason": "r"}),
                vec!["instances: expected a list of instance ids"],
            ),
            (
                json!({"action": "rotate", "pool": "prod/general", "instances": [I1], "all": true, "reason": "r"}),
                vec!["instances, all: give one of them, not both"],
            ),
            (
                json!({"action": "rotate", "pool": "prod/general", "all": false, "reason": "r"}),
                vec!["instances: required (a list of instance ids), or \"all\": true"],
            ),
            (
                json!({"action": "rotate", "pool": "prod/general", "all": "yes", "reason": "r", "ignoreBudgets": "true"}),
                vec![
                    "all: expected true or false",
                    "instances: required (a list of instance ids), or \"all\": true",
                    "ignoreBudgets: expected true or false",
                ],
            ),
            (
                json!({"action": "rotate", "pool": "prod/general", "all": true, "reason": "r", "maxConcurrent": 2}),
                vec![
                    "maxConcurrent: only applies with \"ignoreBudgets\": true (budgets bound the others)",
                ],
            ),
            (
                json!({"action": "rotate", "pool": "prod/general", "all": true, "reason": "r", "ignoreBudgets": true, "maxConcurrent": 0}),
                vec!["maxConcurrent: expected a whole number from 1 to 100, got 0"],
            ),
            (
                json!({"action": "rotate", "pool": "prod/general", "all": true, "reason": "r", "ignoreBudgets": true, "maxConcurrent": 1.5}),
                vec!["maxConcurrent: expected a whole number from 1 to 100, got 1.5"],
            ),
            (
                json!({"action": "rotate", "pool": "prod/general", "all": true, "reason": "r", "ignoreBudget": true}),
                vec![
                    "ignoreBudget: not a field of rotate (fields: action, pool, instances, all, reason, ignoreBudgets, maxConcurrent)",
                ],
            ),
            (
                json!({"action": "pin", "pool": "prod/general"}),
                vec![
                    "ami: required (ami-...)",
                    "reason: required; say why (it is written to the audit record)",
                ],
            ),
            (
                json!({"action": "pin", "pool": "prod/general", "ami": "ami-XYZ", "reason": "r"}),
                vec!["ami: \"ami-XYZ\" is not an AMI id (ami-...)"],
            ),
            (
                json!({"action": "unpin", "pool": "prod/general", "ami": "ami-0123456789abcdef0", "reason": "r"}),
                vec!["ami: not a field of unpin (fields: action, pool, reason)"],
            ),
            (
                json!({"action": "pause"}),
                vec![
                    "pool: required (\"<cluster>/<name>\")",
                    "reason: required; say why (it is written to the audit record)",
                ],
            ),
            (
                json!({"action": "resume", "pool": "prod/general", "reason": 1}),
                vec!["reason: expected a string"],
            ),
            (
                json!({"action": "cancel", "pool": "prod/general", "reason": "r"}),
                vec!["instance: required (i-...)"],
            ),
            (
                json!({"action": "cancel", "pool": "prod/general", "instance": "i-123", "instances": [I1], "reason": "r"}),
                vec![
                    "instance: \"i-123\" is not an instance id (i-...)",
                    "instances: not a field of cancel (fields: action, pool, instance, reason)",
                ],
            ),
            (
                json!({"action": "quarantine"}),
                vec![
                    "ami, release: required; give one (an image id ami-..., or a release: v20241109 for AL2023/AL2, 1.26.0 for Bottlerocket, or an image id ami-...)",
                    "reason: required; say why (it is written to the audit record)",
                ],
            ),
            (
                json!({"action": "quarantine", "ami": "ami-0123456789abcdef0", "release": "v20241109", "reason": "r"}),
                vec!["ami, release: give one of them, not both"],
            ),
            (
                json!({"action": "quarantine", "ami": "ami-XYZ", "reason": ""}),
                vec![
                    "ami: \"ami-XYZ\" is not an AMI id (ami-...)",
                    "reason: empty; say why (it is written to the audit record)",
                ],
            ),
            (
                json!({"action": "quarantine", "release": "20241109", "reason": "r"}),
                vec![
                    "release: \"20241109\" is not a release (v20241109 for AL2023/AL2, 1.26.0 for Bottlerocket, or an image id ami-...)",
                ],
            ),
            (
                json!({"action": "quarantine", "release": 20241109, "reason": "r"}),
                vec!["release: expected a string"],
            ),
            (
                json!({"action": "unquarantine", "pool": "prod/general", "release": "v1.26.0", "reason": "r"}),
                vec![
                    "release: \"v1.26.0\" is not a release (v20241109 for AL2023/AL2, 1.26.0 for Bottlerocket, or an image id ami-...)",
                    "pool: not a field of unquarantine (fields: action, ami, release, reason)",
                ],
            ),
            (
                json!({"action": "promotion"}),
                vec![
                    "release: required (v20241109 for AL2023/AL2, 1.26.0 for Bottlerocket, or an image id ami-...)",
                ],
            ),
            (
                json!({"action": "rollout", "pool": "prod", "minReady": "0%", "release": ""}),
                vec![
                    "pool: expected \"<cluster>/<name>\", got \"prod\"",
                    "release: expected an image id, image name, release version or pinned alias of 1 to 256 characters",
                    "minReady: min-ready \"0%\": expected a percentage from 1% to 100%, or a node count",
                ],
            ),
            (
                json!({"action": "promotion", "release": "v2024110", "reason": "r"}),
                vec![
                    "release: \"v2024110\" is not a release (v20241109 for AL2023/AL2, 1.26.0 for Bottlerocket, or an image id ami-...)",
                    "reason: not a field of promotion (fields: action, release)",
                ],
            ),
        ];
        for (payload, want) in cases {
            let got = parse(&payload).expect_err(&payload.to_string());
            assert_eq!(got, want, "{payload}");
        }
    }

    #[test]
    fn ids() {
        assert!(is_instance_id("i-01234567"));
        assert!(is_instance_id("i-0123456789abcdef0"));
        assert!(!is_instance_id("i-0123456789ABCDEF0"));
        assert!(!is_instance_id("i-012345678"));
        assert!(is_ami_id("ami-0123456789abcdef0"));
        assert!(!is_ami_id("i-0123456789abcdef0"));
        assert!(is_release_version("v20241109"));
        assert!(is_release_version("1.26.0"));
        assert!(!is_release_version("v1.26.0"));
        assert!(!is_release_version("1.26"));
        assert!(!is_release_version("latest"));
    }
}
