//! The ends of a rotation: finish (the instance is gone), cancel (its AMI is quarantined), fail
//! (halting the pool and quarantining the image when the step function says so). Each records
//! the end with what it owes of its surge ([`RotatorHandler::end`]).

use super::*;
use crate::rotation::step::Failure;

/// How a rotation fails (`Command::Fail`).
pub(super) struct Failing<'a> {
    /// Why.
    pub why: &'a Failure,
    /// Halt the pool.
    pub halt: bool,
    /// Quarantine the image the rotation rolled out.
    pub quarantine: bool,
    /// The surge to give back.
    pub undo: Option<&'a GiveBack>,
}

impl RotatorHandler {
    /// `Finish`: the instance terminated (the surge is given) or left the group.
    pub(super) async fn finish(
        &self,
        ctx: &mut PoolCtx<'_>,
        v: Versioned<Rotation>,
        command: &Command,
        why: &FinishReason,
        undo: Option<&GiveBack>,
    ) -> Result<Performed, PortError> {
        let r = &v.value.clone();
        if r.step == Step::Terminating {
            self.delete_node(ctx, r).await;
        }
        let now = ctx.clock.now();
        let done = match why {
            FinishReason::Terminated => r.enter(Step::Done, now).with_release(UnitRelease::Given),
            FinishReason::InstanceLeft => r.enter(Step::Done, now),
            FinishReason::Relaunched { replacement } => Rotation {
                replacement: Some(replacement.clone()),
                ..r.enter(Step::Done, now)
            },
            FinishReason::NoLongerNeeded => Rotation {
                error: Some(
                    "no longer needed: the desired AMI is again the one this instance runs".into(),
                ),
                ..r.enter(Step::Cancelled, now)
            },
        };
        log_move(r, command, done.step, "finished");
        self.end(&v, done, undo, async { Ok(()) }).await
    }

    /// `Cancel`: the AMI the rotation rolled out (`image`) is quarantined; the node is
    /// uncordoned (its drain aborted) when `uncordon` says so.
    pub(super) async fn cancel(
        &self,
        ctx: &mut PoolCtx<'_>,
        v: Versioned<Rotation>,
        command: &Command,
        image: &str,
        uncordon: bool,
        undo: Option<&GiveBack>,
    ) -> Result<Performed, PortError> {
        let r = &v.value.clone();
        let cancelled = Rotation {
            error: Some(format!(
                "cancelled: {image}, the AMI it rolled out, is quarantined"
            )),
            ..r.enter(Step::Cancelled, ctx.clock.now())
        };
        let after = async {
            log_move(
                r,
                command,
                Step::Cancelled,
                "rotation cancelled: its AMI is quarantined",
            );
            if uncordon {
                let drain: Option<DrainState> =
                    r.drain.clone().and_then(|d| serde_json::from_value(d).ok());
                match drain {
                    Some(state) => k::abort_drain(ctx.kube.as_ref(), &state).await?,
                    None => {
                        let known = ctx.observed_node(&r.instance_id);
                        if let Some(node) =
                            k::node_of(ctx.kube.as_ref(), &r.instance_id, known).await?
                        {
                            ctx.kube.undo_cordon(&node.name, true).await?;
                        }
                    }
                }
            }
            Ok(())
        };
        self.end(&v, cancelled, undo, after).await
    }

    /// `Fail`: halt and quarantine first (if recording the failure is lost, the next pass
    /// fails it again: both are idempotent), then record `Failed`.
    pub(super) async fn fail(
        &self,
        ctx: &mut PoolCtx<'_>,
        v: Versioned<Rotation>,
        _command: &Command,
        how: Failing<'_>,
    ) -> Result<Performed, PortError> {
        let r = &v.value.clone();
        let now = ctx.clock.now();
        let message = how.why.to_string();
        if how.halt {
            self.halt(&r.pool, &message, now).await?;
        }
        if how.quarantine {
            self.quarantine_failed(ctx, r, &how.why.what(), now).await?;
        }
        let failed = Rotation {
            error: Some(message),
            ..r.enter(Step::Failed, now)
        };
        let halt = how.halt;
        let after = async {
            tracing::error!(pool = %r.pool, instance = %r.instance_id, decision = "rotation failed", reason = %how.why, halt);
            Ok(())
        };
        self.end(&v, failed, how.undo, after).await
    }
}
