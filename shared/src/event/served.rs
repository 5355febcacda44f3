//! Which accounts and regions a deployment acts for: an event about any other is refused before
//! it changes anything, whatever delivered it (a mis-scoped rule, a direct invoke).

use async_trait::async_trait;

use crate::port::PortError;
use crate::problem::quote;

/// The accounts and regions whose events this deployment acts on. Today its own account and
/// region ([`crate::aws::identity::OwnAccount`]); a list, so that serving more is configuration.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Served {
    /// 12-digit account ids.
    pub accounts: Vec<String>,
    /// Region names (`us-east-2`).
    pub regions: Vec<String>,
}

impl Served {
    /// `Ok` when the event's `account` and `region` are served; else why not (quoting at most a
    /// prefix of what the event says). A missing account or region is refused: it cannot be
    /// checked.
    pub fn check(&self, account: Option<&str>, region: Option<&str>) -> Result<(), String> {
        let one = |what: &str, got: Option<&str>, served: &[String]| match got {
            Some(g) if served.iter().any(|s| s == g) => Ok(()),
            Some(g) => Err(format!(
                "the event's {what} {} is not one this deployment serves ({})",
                quote(g),
                if served.is_empty() {
                    "none".to_string()
                } else {
                    served.join(", ")
                }
            )),
            None => Err(format!(
                "the event has no {what}; expected an EventBridge event of a served {what}"
            )),
        };
        one("account", account, &self.accounts)?;
        one("region", region, &self.regions)
    }
}

/// Where the served accounts and regions come from.
#[async_trait]
pub trait Deployment: Send + Sync {
    /// The accounts and regions served.
    async fn served(&self) -> Result<Served, PortError>;
}

/// A fixed set (configuration, tests).
#[async_trait]
impl Deployment for Served {
    async fn served(&self) -> Result<Served, PortError> {
        Ok(self.clone())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_served_accounts_and_regions() {
        let s = Served {
            accounts: vec!["123456789012".into()],
            regions: vec!["us-east-2".into()],
        };
        assert_eq!(s.check(Some("123456789012"), Some("us-east-2")), Ok(()));
        let e = s
            .check(Some("999999999999"), Some("us-east-2"))
            .unwrap_err();
        assert!(e.contains("account \"999999999999\""), "{e}");
        let e = s
            .check(Some("123456789012"), Some("eu-west-1"))
            .unwrap_err();
        assert!(e.contains("region \"eu-west-1\""), "{e}");
        assert!(s.check(None, Some("us-east-2")).is_err());
        assert!(s.check(Some("123456789012"), None).is_err());
        assert!(Served::default().check(Some("1"), Some("r")).is_err());
        let e = s.check(Some(&"9".repeat(1 << 20)), None).unwrap_err();
        assert!(e.len() < 300, "{}", e.len());
    }
}
