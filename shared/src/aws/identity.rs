//! The deployment's own account and region: STS GetCallerIdentity (which needs no IAM
//! permission) once per process, and the SDK configuration's region; plus the accounts and
//! regions configured to be served (`NODECYCLE_SERVED_ACCOUNTS`, `NODECYCLE_SERVED_REGIONS`).

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
    served: OnceCell<Served>,
}

impl OwnAccount {
    /// Over `config` (its region; its credentials name the account).
    pub fn new(config: &aws_config::SdkConfig) -> Self {
        OwnAccount {
            sts: aws_sdk_sts::Client::new(config),
            region: config.region().map(ToString::to_string),
            served: OnceCell::new(),
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
                let env = |name: &str| std::env::var(name).unwrap_or_default();
                Served {
                    accounts: vec![account],
                    regions: self.region.iter().cloned().collect(),
                }
                .with_extra(
                    &env(crate::event::served::ACCOUNTS_ENV),
                    &env(crate::event::served::REGIONS_ENV),
                )
                .map_err(|e| PortError::new("configuration", ErrorKind::Other, e))
            })
            .await
            .cloned()
    }
}
