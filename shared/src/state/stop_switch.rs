//! The deployment's stop switch (`DEPLOYMENT`/`STOP`).

use super::*;

impl Repository {
    /// Reads the switch: `Ok(None)` when absent or set to not stopped; an item whose `doc` is
    /// no switch counts as stopped, with that said in its reason.
    pub async fn stop_switch(&self) -> Result<Option<StopSwitch>, PortError> {
        let Some(item) = self.store.get(keys::DEPLOYMENT_PK, keys::STOP_SK).await? else {
            return Ok(None);
        };
        let switch = serde_json::from_value::<StopSwitch>(item.value.clone())
            .unwrap_or_else(|e| StopSwitch::unreadable(&e.to_string()));
        Ok(switch.stopped.then_some(switch))
    }

    /// [`Repository::stop_switch`] as the gate's message; a switch that cannot be read is a
    /// stop too (fail closed).
    pub async fn stop_gate(&self) -> Option<String> {
        match self.stop_switch().await {
            Ok(s) => s.map(|s| s.message()),
            Err(e) => {
                tracing::error!(error = %e, decision = "stopped", "cannot read the stop switch; holding every pool");
                Some(format!(
                    "cannot read the stop switch ({}/{}): {e}; holding every pool",
                    keys::DEPLOYMENT_PK,
                    keys::STOP_SK
                ))
            }
        }
    }

    /// Sets the switch to `switch` (conditional write, re-read on a lost race). Returns the
    /// switch before (`None`: absent or not stopped) and whether the write changed anything:
    /// flipping to the state it is already in keeps the first record (who stopped, and why).
    pub async fn set_stop_switch(
        &self,
        switch: &StopSwitch,
    ) -> Result<(Option<StopSwitch>, bool), PortError> {
        let mut last = None;
        for attempt in 0..WRITE_ATTEMPTS {
            if attempt > 0 {
                self.store.backoff(attempt).await;
            }
            let current = self.store.get(keys::DEPLOYMENT_PK, keys::STOP_SK).await?;
            let before = current
                .as_ref()
                .and_then(|v| serde_json::from_value::<StopSwitch>(v.value.clone()).ok());
            let was_stopped = match (&current, &before) {
                (None, _) => false,
                (Some(_), Some(b)) => b.stopped,
                (Some(_), None) => true,
            };
            let before = before.filter(|b| b.stopped);
            if current.is_some() && was_stopped == switch.stopped {
                return Ok((before, false));
            }
            if current.is_none() && !switch.stopped {
                return Ok((None, false));
            }
            let doc = encode(switch)?;
            match self
                .store
                .put(
                    keys::DEPLOYMENT_PK,
                    keys::STOP_SK,
                    &doc,
                    current.map(|v| v.version),
                    None,
                )
                .await
            {
                Ok(_) => return Ok((before, true)),
                Err(e) if e.kind == ErrorKind::Conflict => last = Some(e),
                Err(e) => return Err(e),
            }
        }
        Err(last.unwrap_or_else(too_many_conflicts))
    }
}
