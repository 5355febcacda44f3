//! Withdrawals in a watcher pass: every parameter the pools resolved through before is read
//! again (through the pass's resolver: the pools' resolution then reads it from the memo), and
//! one that moved back to an older image at a higher version quarantines the image it left
//! ([`crate::promotion::withdrawal`]) before any pool is resolved, so no pool takes it this
//! pass. Parameters read for the first time are remembered at the end of the pass. Only the
//! parameters of this stack's region are followed (a member region's are not yet).

use std::collections::BTreeSet;

use chrono::{DateTime, Utc};

use super::AmiWatcher;
use crate::ami::resolve::Resolver;
use crate::promotion::Quarantined;
use crate::promotion::withdrawal::{Read, withdrawn};
use crate::state::SeenParameter;

impl AmiWatcher {
    /// Reads every parameter seen before; quarantines what a withdrawal left (added to
    /// `quarantined`) and records each newer version. Returns the quarantine and the names
    /// already remembered. Best effort: what cannot be read is logged and tried next pass.
    pub(super) async fn follow_withdrawals(
        &self,
        resolver: &Resolver<'_>,
        mut quarantined: Quarantined,
        now: DateTime<Utc>,
    ) -> (Quarantined, BTreeSet<String>) {
        let seen = match self.cell.state.seen_parameters().await {
            Ok(s) => s,
            Err(e) => {
                tracing::warn!(error = %e, "cannot read the parameters seen; withdrawals are followed next pass");
                return (quarantined, BTreeSet::new());
            }
        };
        let known: BTreeSet<String> = seen.keys().cloned().collect();
        if seen.is_empty() {
            return (quarantined, known);
        }
        let names: Vec<String> = known.iter().cloned().collect();
        let current = match resolver.parameter_versions(&names).await {
            Ok(c) => c,
            Err(e) => {
                tracing::warn!(error = %e, "cannot read the parameters seen; withdrawals are followed next pass");
                return (quarantined, known);
            }
        };
        let moved: Vec<(&String, &SeenParameter, crate::ami::resolve::Parameter)> = seen
            .iter()
            .filter_map(|(name, s)| {
                let now = current.get(name)?.clone()?;
                (now.version > s.version).then_some((name, s, now))
            })
            .collect();
        if moved.is_empty() {
            return (quarantined, known);
        }
        let ids: Vec<String> = moved
            .iter()
            .flat_map(|(_, s, c)| [s.value.clone(), c.value.clone()])
            .filter(|v| v.starts_with("ami-"))
            .collect();
        let images = if ids.is_empty() {
            Vec::new()
        } else {
            match resolver.images_with_ids(&ids).await {
                Ok(i) => i,
                Err(e) => {
                    tracing::warn!(error = %e, "cannot describe the images of moved parameters; withdrawals are followed next pass");
                    return (quarantined, known);
                }
            }
        };
        for (name, seen, current) in moved {
            let was = Read {
                version: seen.version,
                value: &seen.value,
            };
            let is = Read {
                version: current.version,
                value: &current.value,
            };
            if let Some(q) = withdrawn(name, was, is, &images, now)
                && !quarantined.0.iter().any(|e| e.target == q.target)
            {
                match self.cell.announce.put_quarantine(&q).await {
                    Ok(new) => {
                        if new {
                            tracing::error!(parameter = %name, target = %q.target, decision = "withdrawn", reason = %q.reason, "quarantined: no pool takes it, pools on it roll back");
                        }
                        quarantined.0.push(q);
                    }
                    Err(e) => {
                        // The newer version is not recorded: the next pass tries again.
                        tracing::error!(parameter = %name, target = %q.target, error = %e, "withdrawal seen but the quarantine could not be recorded; next pass");
                        continue;
                    }
                }
            }
            self.see(name, &current, now).await;
        }
        (quarantined, known)
    }

    /// Remembers the parameters the pass read that were not `known` (a later pass compares
    /// with them).
    pub(super) async fn remember_parameters(
        &self,
        resolver: &Resolver<'_>,
        known: &BTreeSet<String>,
        now: DateTime<Utc>,
    ) {
        for (name, p) in resolver.parameters_read() {
            if !known.contains(&name) {
                self.see(&name, &p, now).await;
            }
        }
    }

    async fn see(&self, name: &str, p: &crate::ami::resolve::Parameter, now: DateTime<Utc>) {
        let seen = SeenParameter {
            version: p.version,
            value: p.value.clone(),
            at: now,
        };
        if let Err(e) = self.cell.state.see_parameter(name, &seen).await {
            tracing::warn!(parameter = %name, error = %e, "cannot record the parameter's version; next pass");
        }
    }
}
