//! Auto Scaling lifecycle actions in the fake cloud (`tests/fakecloud/lifecycle.py`).

use serde_json::{Value, json};

use crate::fakecloud::FakeCloud;

impl FakeCloud {
    /// Puts `instance` of Auto Scaling group `group` into the wait state of lifecycle hook
    /// `hook` (created with PutLifecycleHook), as Auto Scaling does when a scale-in meets a
    /// terminating hook (desired capacity lowered). `token`: the LifecycleActionToken the
    /// event carries (a new UUID when `None`). Returns the token.
    pub fn lifecycle_wait(
        &self,
        group: &str,
        hook: &str,
        instance: &str,
        token: Option<&str>,
    ) -> String {
        let mut args = json!({ "group": group, "hook": hook, "instance": instance });
        if let Some(t) = token {
            args["token"] = json!(t);
        }
        self.control("lifecycle_wait", args)["token"]
            .as_str()
            .expect("lifecycle_wait answers a token")
            .to_string()
    }

    /// CompleteLifecycleAction / RecordLifecycleActionHeartbeat calls, in order:
    /// `{action, group, hook, instance, token, result, ts, error?}`.
    pub fn lifecycle_calls(&self) -> Vec<Value> {
        self.control("lifecycle_actions", json!({}))["calls"]
            .as_array()
            .cloned()
            .unwrap_or_default()
    }
}
