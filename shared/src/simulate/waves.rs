//! A managed node group update in the forecast: waves of `maxUnavailable` nodes, oldest first,
//! each taking the rotation time; the next starts when one ends; then the update is
//! `Successful`.

use chrono::{DateTime, Utc};

use super::engine::{Pool, Wave};
use super::ready_member;
use crate::fleet::Lifecycle;
use crate::managed::Phase;
use crate::rotation::RotationReason;

impl Pool {
    /// The running wave is done at `t`: its nodes are replaced; the next wave starts, or the
    /// update is successful.
    pub(super) fn complete_wave(&mut self, t: DateTime<Utc>) {
        let Some(m) = self.managed.as_mut() else {
            return;
        };
        let (Some(wave), Some(update)) = (m.wave.take(), m.update.as_ref()) else {
            return;
        };
        let image = update.image.clone();
        for (id, out) in wave.nodes.iter().zip(&wave.out) {
            self.snap.members.retain(|m| &m.instance_id != id);
            let fresh = self.fresh_id();
            self.snap
                .members
                .push(ready_member(&fresh, &image, wave.start));
            self.joined(&fresh, t);
            if let Some(span) = self.out.rotations.get_mut(*out) {
                span.replacement = Some(fresh);
            }
        }
        if self.wave_nodes(&image).is_empty() {
            if let Some(u) = self.managed.as_mut().and_then(|m| m.update.as_mut()) {
                u.phase = Phase::Successful;
                u.phase_at = t;
            }
        } else {
            self.start_wave(t);
        }
    }

    /// In-service nodes an update to `image` still replaces, oldest first.
    fn wave_nodes(&self, image: &str) -> Vec<String> {
        let mut nodes: Vec<_> = self
            .snap
            .members
            .iter()
            .filter(|m| m.lifecycle == Lifecycle::InService)
            .filter(|m| m.image_id.as_deref() != Some(image))
            .filter(|m| !self.running.iter().any(|r| r.instance == m.instance_id))
            .map(|m| (m.launch_time, m.instance_id.clone()))
            .collect();
        nodes.sort();
        nodes.into_iter().map(|(_, id)| id).collect()
    }

    /// Starts the next wave of the recorded update at `t` (an update with nothing to replace
    /// still takes one wave).
    pub(super) fn start_wave(&mut self, t: DateTime<Utc>) {
        let Some((image, width)) = self
            .managed
            .as_ref()
            .and_then(|m| m.update.as_ref())
            .map(|u| (u.image.clone(), u.max_unavailable.max(1)))
        else {
            return;
        };
        let mut nodes = self.wave_nodes(&image);
        nodes.truncate(usize::try_from(width).unwrap_or(usize::MAX));
        let end = t + self.rotation;
        let mut out = Vec::new();
        for id in &nodes {
            if let Some(node) = self
                .snap
                .members
                .iter_mut()
                .find(|m| &m.instance_id == id)
                .and_then(|m| m.node.as_mut())
            {
                node.unschedulable = true;
            }
            out.push(self.push_span(id, RotationReason::Drifted, false, t, end, true));
        }
        if let Some(m) = self.managed.as_mut() {
            m.wave = Some(Wave {
                nodes,
                out,
                start: t,
                end,
            });
        }
    }
}
