//! The deployment's own account and region: STS GetCallerIdentity (which needs no IAM
//! permission) once per process, and the SDK configuration's region; plus the accounts and
//! regions configured to be served (`NODECYCLE_SERVED_ACCOUNTS`, `NODECYCLE_SERVED_REGIONS`,
//! read and checked by `crate::wiring` and given to [`OwnAccount::with_extra`]).

use async_trait::async_trait;
use tokio::sync::OnceCell;

use super::port_error;
use crate::event::served::{Deployment, Served};
use crate::port::{ErrorKind, PortError};

/// The account of the function's own credentials and the region it runs in.
#[derive(Debug)]
pub struct OwnAccount {
    sts: aws_sdk_sts::Client,
    region: Option<String>,
    /// Accounts and regions served beside the own (comma-separated, as configured).
    extra: (String, String),
    served: OnceCell<Served>,
}

impl OwnAccount {
    /// Over `config` (its region; its credentials name the account).
    pub fn new(config: &aws_config::SdkConfig) -> Self {
        OwnAccount {
            sts: aws_sdk_sts::Client::new(config),
            region: config.region().map(ToString::to_string),
            extra: (String::new(), String::new()),
            served: OnceCell::new(),
        }
    }

    /// Serving `accounts` and `regions` (comma-separated, [`Served::with_extra`]) beside the
    /// own account and region.
    pub fn with_extra(self, accounts: &str, regions: &str) -> Self {
        OwnAccount {
            extra: (accounts.to_string(), regions.to_string()),
            ..self
        }
    }
}

#[async_trait]
impl Deployment for OwnAccount {
    async fn served(&self) -> Result<Served, PortError> {
        self.served
            .get_or_try_init(|| async {
                let out = self
                    .sts
                    .get_caller_identity()
                    .send()
                    .await
                    .map_err(|e| port_error("sts:GetCallerIdentity", e))?;
                let account = out.account().map(str::to_string).ok_or_else(|| {
                    PortError::new(
                        "sts:GetCallerIdentity",
                        ErrorKind::Other,
                        "no account in the response",
                    )
                })?;
                Served {
                    accounts: vec![account],
                    regions: self.region.iter().cloned().collect(),
                }
                .with_extra(&self.extra.0, &self.extra.1)
                .map_err(|e| PortError::new("configuration", ErrorKind::Other, e))
            })
            .await
            .cloned()
    }
}
