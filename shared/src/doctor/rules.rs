//! The stack's EventBridge rules are enabled.

use super::{Check, CheckKind};
use crate::port::PortError;

/// One `eventRule` check from the rule's state (`None`: no such rule).
pub fn check(name: &str, state: Result<Option<String>, PortError>) -> Check {
    let missing = (
        "no such rule on the default event bus",
        "the stack lists it in EventRuleNames: update or redeploy the stack",
    );
    Check::if_found(state, CheckKind::EventRule, name, missing, |s| {
        if s == "ENABLED" || s == "ENABLED_WITH_ALL_CLOUDTRAIL_MANAGEMENT_EVENTS" {
            Check::ok(CheckKind::EventRule, name, s)
        } else {
            Check::fail(
                CheckKind::EventRule,
                name,
                format!("{s}: its events never reach nodecycle"),
                format!("aws events enable-rule --name {name}"),
            )
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::doctor::Status;
    use crate::port::ErrorKind;

    #[test]
    fn states() {
        let s = |v: &str| check("r", Ok(Some(v.to_owned()))).status;
        assert_eq!(s("ENABLED"), Status::Ok);
        assert_eq!(
            s("ENABLED_WITH_ALL_CLOUDTRAIL_MANAGEMENT_EVENTS"),
            Status::Ok
        );
        assert_eq!(s("DISABLED"), Status::Fail);
        assert_eq!(check("r", Ok(None)).status, Status::Fail);
        let e = PortError::new("events:DescribeRule", ErrorKind::AccessDenied, "no");
        assert_eq!(check("r", Err(e)).status, Status::Fail);
        assert!(
            check("r", Ok(Some("DISABLED".into())))
                .fix
                .contains("enable-rule --name r")
        );
    }
}
