//! Which accounts and regions a deployment acts for: an event about any other is refused before
//! it changes anything, whatever delivered it (a mis-scoped rule, a direct invoke).

use async_trait::async_trait;

use crate::port::{ErrorKind, PortError};
use crate::problem::quote;

/// The accounts and regions whose events this deployment acts on: its own account and region
/// ([`crate::aws::identity::OwnAccount`]) and those configured in [`ACCOUNTS_ENV`] and
/// [`REGIONS_ENV`] ([`Served::with_extra`]).
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

/// Environment variable listing more accounts to serve (comma-separated 12-digit ids).
pub const ACCOUNTS_ENV: &str = "NODECYCLE_SERVED_ACCOUNTS";
/// Environment variable listing more regions to serve (comma-separated region names).
pub const REGIONS_ENV: &str = "NODECYCLE_SERVED_REGIONS";

impl Served {
    /// This set plus the comma-separated `accounts` and `regions` (configuration: empty adds
    /// nothing). `Err` names the entry that is not a 12-digit account id or a region name.
    pub fn with_extra(mut self, accounts: &str, regions: &str) -> Result<Served, String> {
        let items = |text: &str| -> Vec<String> {
            text.split(',')
                .map(str::trim)
                .filter(|s| !s.is_empty())
                .map(str::to_string)
                .collect()
        };
        for a in items(accounts) {
            if a.len() != 12 || !a.bytes().all(|b| b.is_ascii_digit()) {
                return Err(format!(
                    "{ACCOUNTS_ENV}: {} is not an account id; expected 12 digits",
                    quote(&a)
                ));
            }
            if !self.accounts.contains(&a) {
                self.accounts.push(a);
            }
        }
        for r in items(regions) {
            let parts: Vec<&str> = r.split('-').collect();
            let region_like = parts.len() >= 3
                && parts.iter().all(|p| {
                    !p.is_empty()
                        && p.bytes()
                            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit())
                })
                && parts
                    .last()
                    .is_some_and(|p| p.bytes().all(|b| b.is_ascii_digit()));
            if !region_like {
                return Err(format!(
                    "{REGIONS_ENV}: {} is not a region name; expected one like us-east-2",
                    quote(&r)
                ));
            }
            if !self.regions.contains(&r) {
                self.regions.push(r);
            }
        }
        Ok(self)
    }
}

/// Where the served accounts and regions come from.
#[async_trait]
pub trait Deployment: Send + Sync {
    /// The accounts and regions served: the cell's own account and region first, then the
    /// members (the accounts whose pools and events the cell serves) and other regions.
    async fn served(&self) -> Result<Served, PortError>;

    /// The cell's own account and region: the first of each of [`Deployment::served`].
    async fn cell(&self) -> Result<crate::policy::Place, PortError> {
        let served = self.served().await?;
        served
            .cell()
            .map_err(|e| PortError::new("configuration", ErrorKind::Other, e))
    }
}

impl Served {
    /// The cell's own account and region (the first of each); `Err` when either is missing or
    /// invalid.
    pub fn cell(&self) -> Result<crate::policy::Place, String> {
        match (self.accounts.first(), self.regions.first()) {
            (Some(a), Some(r)) => crate::policy::Place::new(a, r),
            _ => Err("the deployment's own account or region is unknown".to_string()),
        }
    }

    /// The member accounts: the served accounts other than the cell's own.
    pub fn members(&self) -> &[String] {
        self.accounts.get(1..).unwrap_or_default()
    }

    /// Whether `place` (an account and region an event claims) is served, and which: `Ok(None)`
    /// for the cell's own account and region, `Ok(Some(place))` for another served one, `Err`
    /// ([`Served::check`]) for one not served.
    pub fn route(
        &self,
        account: Option<&str>,
        region: Option<&str>,
    ) -> Result<Option<crate::policy::Place>, String> {
        self.check(account, region)?;
        let (Some(account), Some(region)) = (account, region) else {
            return Err("the event names no account or region".to_string());
        };
        let place = crate::policy::Place::new(account, region)?;
        Ok((self.cell().ok().as_ref() != Some(&place)).then_some(place))
    }
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
        // More accounts and regions by configuration.
        let more = s
            .clone()
            .with_extra(" 210987654321, 123456789012 ,", "eu-west-1,us-gov-west-1")
            .unwrap();
        assert_eq!(more.accounts, ["123456789012", "210987654321"]);
        assert_eq!(more.check(Some("210987654321"), Some("eu-west-1")), Ok(()));
        assert_eq!(s.clone().with_extra("", ""), Ok(s.clone()));
        let e = s.clone().with_extra("12345", "").unwrap_err();
        assert!(e.starts_with("NODECYCLE_SERVED_ACCOUNTS: \"12345\""), "{e}");
        let e = s.clone().with_extra("", "Europe").unwrap_err();
        assert!(e.starts_with("NODECYCLE_SERVED_REGIONS: \"Europe\""), "{e}");
        // Routing: the cell's own is `None`, a member's place `Some`, an unserved one refused.
        assert_eq!(
            more.route(Some("123456789012"), Some("us-east-2")),
            Ok(None)
        );
        assert_eq!(
            more.route(Some("210987654321"), Some("eu-west-1")),
            Ok(Some(
                crate::policy::Place::new("210987654321", "eu-west-1").unwrap()
            ))
        );
        assert!(more.route(Some("999999999999"), Some("us-east-2")).is_err());
        assert_eq!(more.members(), ["210987654321"]);
        assert_eq!(
            more.cell(),
            crate::policy::Place::new("123456789012", "us-east-2")
        );
        let e = s.check(Some(&"9".repeat(1 << 20)), None).unwrap_err();
        assert!(e.len() < 300, "{}", e.len());
    }
}
