//! The capacity commands of the step function: surge (record the intent, then +1 on a fresh
//! read), raise a surge again, drop a surge that cannot be had, terminate an instance (giving
//! its surge back with the decrement).

use super::*;

impl RotatorHandler {
    /// `Surge`: the intent first, then +1 on a fresh read. A crash or a failed call in between
    /// leaves a surge without supply, raised again next pass (see the step function).
    pub(super) async fn surge(
        &self,
        ctx: &mut PoolCtx<'_>,
        v: Versioned<Rotation>,
        command: &Command,
        baseline: &[String],
        read: i32,
        above_max: bool,
    ) -> Result<Performed, PortError> {
        let r = &v.value;
        let from = r.step;
        let next = surging_record(r, baseline, read, above_max, ctx.clock.now());
        log_move(r, command, Step::Surging, "surge");
        let Some(saved) = self.save(&v, next).await? else {
            return Ok(Performed::Lost);
        };
        self.raise(ctx, &saved.value, above_max).await?;
        Ok(Performed::Step(from, Step::Surging))
    }

    /// `Raise`: the surge has neither an instance nor a pending launch (never raised, or
    /// another writer took its unit): +1 again.
    pub(super) async fn raise_again(
        &self,
        ctx: &mut PoolCtx<'_>,
        r: &Rotation,
        above_max: bool,
    ) -> Result<Performed, PortError> {
        tracing::info!(pool = %r.pool, instance = %r.instance_id, decision = "surge raised again", "the surge has neither an instance nor a pending launch (never raised, or another writer took its unit)");
        self.raise(ctx, r, above_max).await?;
        Ok(Performed::Idle)
    }

    /// `DropSurge`: the group is at MaxSize and the surge holds no unit; the node is replaced
    /// without a surge (drain first).
    pub(super) async fn drop_surge(
        &self,
        ctx: &mut PoolCtx<'_>,
        v: Versioned<Rotation>,
        command: &Command,
    ) -> Result<Performed, PortError> {
        let r = &v.value;
        let next = r
            .enter(Step::Cordoned, ctx.clock.now())
            .with_release(UnitRelease::Given);
        log_move(
            r,
            command,
            Step::Cordoned,
            "surge dropped: the group is at MaxSize and the surge holds no unit; replaced without a surge (drain first)",
        );
        moved(r.step, self.save(&v, next).await?)
    }

    /// `Terminate`: with a decrement, record first that this terminate gives the surge back
    /// (if the instance is gone next pass, that was us, not a loss to undo); with `relaunch`,
    /// record first the group's instances (kept from an earlier attempt); then terminate
    /// through the group, delete the Node, and record `Done`, or, with `relaunch`, leave the
    /// rotation `Terminating` until its relaunch is confirmed.
    pub(super) async fn terminate(
        &self,
        ctx: &mut PoolCtx<'_>,
        v: Versioned<Rotation>,
        command: &Command,
        decrement: bool,
        relaunch: bool,
    ) -> Result<Performed, PortError> {
        let r = &v.value.clone();
        let now = ctx.clock.now();
        // The intent, recorded before the call: the relaunch's baseline (kept from an earlier
        // attempt), or that this terminate gives the surge's unit back.
        let intent = if relaunch {
            r.relaunch.is_none().then(|| Rotation {
                relaunch: Some(crate::rotation::Relaunch {
                    baseline: ctx
                        .snapshot
                        .members
                        .iter()
                        .map(|m| m.instance_id.clone())
                        .collect(),
                }),
                ..r.enter(Step::Terminating, now)
            })
        } else {
            (decrement && r.surge_active()).then(|| {
                r.clone()
                    .with_release(UnitRelease::Undoing(Undo::Terminate {
                        instance_id: r.instance_id.clone(),
                    }))
            })
        };
        let v = match intent {
            Some(intent) => match self.save(&v, intent).await? {
                Some(v) => v,
                None => return Ok(Performed::Lost),
            },
            None => v,
        };
        self.ports
            .groups
            .terminate_instance(&r.instance_id, decrement)
            .await?;
        self.delete_node(ctx, r).await;
        if relaunch {
            log_move(
                r,
                command,
                Step::Terminating,
                "terminated first: waiting for the group to relaunch its replacement on the desired AMI",
            );
            return Ok(Performed::Step(r.step, v.value.step));
        }
        let done = r.enter(Step::Done, now).with_release(UnitRelease::Given);
        log_move(r, command, Step::Done, "terminated");
        moved(r.step, self.save(&v, done).await?)
    }
}
