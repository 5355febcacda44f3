//! The deployment's own account and region: STS GetCallerIdentity (which needs no IAM
//! permission) once per process, and the SDK configuration's region.

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
                Ok(Served {
                    accounts: vec![account],
                    regions: self.region.iter().cloned().collect(),
                })
            })
            .await
            .cloned()
    }
}
