//! [`AwsMembers`]: the [`Members`] adapter. The ports of a member account are the SDK clients
//! of an SDK configuration in the pool's region whose credentials come from aws-config's
//! [`AssumeRoleProvider`] on the member's spoke role (with the configured external id), behind
//! the SDK's lazy identity cache (refreshed [`crate::members::REFRESH_BEFORE`] before expiry).
//! They are built once per place and reused by every later pass of the process; a role that
//! cannot be assumed is that place's error (not cached: the next pass tries again).

use std::collections::HashMap;
use std::sync::Arc;

use async_trait::async_trait;
use aws_config::identity::IdentityCache;
use aws_config::sts::AssumeRoleProvider;
use aws_credential_types::provider::{ProvideCredentials, SharedCredentialsProvider};

use crate::members::{self, MemberConfig, MemberError, Serve};
use crate::policy::Place;
use crate::port::PortError;
use crate::ports::Members;
use crate::ports::Ports;

/// Builds the AWS and Kubernetes adapters over an SDK configuration (the wiring's, so a
/// member's adapters are configured as the cell's).
pub type Adapters = Arc<dyn Fn(&aws_config::SdkConfig) -> Ports + Send + Sync>;

/// Members over the SDK: the cell's own ports for its own place, assumed-role clients for the
/// members.
pub struct AwsMembers {
    base: aws_config::SdkConfig,
    own: Ports,
    adapters: Adapters,
    config: Result<MemberConfig, String>,
    built: tokio::sync::Mutex<HashMap<Place, Ports>>,
}

impl AwsMembers {
    /// Over the cell's SDK configuration `base` (the credentials the roles are assumed with)
    /// and its ports `own` (table, policies, bus and metrics are the cell's for every member),
    /// with the role pattern and external id `config` (an `Err` is every member's error: fail
    /// closed on a configuration mistake, the cell's own pools go on).
    pub fn new(
        base: &aws_config::SdkConfig,
        own: Ports,
        config: Result<MemberConfig, String>,
        adapters: Adapters,
    ) -> Self {
        AwsMembers {
            base: base.clone(),
            own,
            adapters,
            config,
            built: tokio::sync::Mutex::new(HashMap::new()),
        }
    }

    /// The SDK configuration of `serve` (not the cell's own), after checking the credentials
    /// can be had (one AssumeRole for a member).
    async fn sdk_for(&self, serve: &Serve) -> Result<aws_config::SdkConfig, MemberError> {
        let region = |place: &Place| aws_config::Region::new(place.region.clone());
        match serve {
            Serve::Own => Ok(self.base.clone()),
            Serve::OwnAccount(place) => Ok(self.base.to_builder().region(region(place)).build()),
            Serve::Member { place, role } => {
                let config = self.config.as_ref().map_err(|e| MemberError {
                    place: place.clone(),
                    field: "account",
                    role: None,
                    message: e.clone(),
                })?;
                let mut builder = AssumeRoleProvider::builder(role.clone())
                    .session_name(members::SESSION_NAME)
                    .session_length(members::SESSION_LENGTH)
                    .configure(&self.base);
                if let Some(id) = &config.external_id {
                    builder = builder.external_id(id.clone());
                }
                let provider = builder.build().await;
                // Fail early with the role and the AWS error rather than on every call.
                if let Err(e) = provider.provide_credentials().await {
                    return Err(MemberError {
                        place: place.clone(),
                        field: "account",
                        role: Some(role.clone()),
                        message: crate::port::error_chain(&e),
                    });
                }
                Ok(self
                    .base
                    .to_builder()
                    .region(region(place))
                    .credentials_provider(SharedCredentialsProvider::new(provider))
                    .identity_cache(
                        IdentityCache::lazy()
                            .buffer_time(members::REFRESH_BEFORE)
                            .build(),
                    )
                    .build())
            }
        }
    }

    /// The ports over `sdk`, sharing the cell's table, policies, bus, metrics and served set.
    fn ports_over(&self, sdk: &aws_config::SdkConfig) -> Ports {
        let own = &self.own;
        Ports {
            policies: own.policies.clone(),
            store: own.store.clone(),
            deployment: own.deployment.clone(),
            events: own.events.clone(),
            metrics: own.metrics.clone(),
            members: own.members.clone(),
            ..(self.adapters)(sdk)
        }
    }
}

impl AwsMembers {
    /// How the spoke roles are assumed (the default when the configuration was refused: every
    /// member then fails with that error).
    pub fn member_config(&self) -> MemberConfig {
        self.config.clone().unwrap_or_default()
    }

    /// The SDK configuration of `place` and the identity it acts as (the spoke role, or the
    /// cell's own credentials), after assuming the role once: what `nodecycle doctor` reads a
    /// member through. `Err` as [`Members::ports`] says.
    pub async fn sdk(&self, place: &Place) -> Result<(String, aws_config::SdkConfig), MemberError> {
        let served = self
            .own
            .deployment
            .served()
            .await
            .map_err(|e| MemberError {
                place: place.clone(),
                field: "account",
                role: None,
                message: format!("cannot tell which accounts this cell serves: {e}"),
            })?;
        let cell = served.cell().map_err(|e| MemberError {
            place: place.clone(),
            field: "account",
            role: None,
            message: e,
        })?;
        let config = self.config.clone().unwrap_or_default();
        let serve = members::serve(place, &cell, &served, &config)?;
        let who = match &serve {
            Serve::Member { role, .. } => role.clone(),
            Serve::Own | Serve::OwnAccount(_) => "the cell's own credentials".to_string(),
        };
        Ok((who, self.sdk_for(&serve).await?))
    }
}

#[async_trait]
impl Members for AwsMembers {
    async fn cell(&self) -> Result<Place, PortError> {
        self.own.deployment.cell().await
    }

    async fn ports(&self, place: &Place) -> Result<Option<Ports>, MemberError> {
        if self.own.deployment.cell().await.ok().as_ref() == Some(place) {
            return Ok(None);
        }
        // One build per place at a time: concurrent passes of a process wait for the first.
        let mut built = self.built.lock().await;
        if let Some(ports) = built.get(place) {
            return Ok(Some(ports.clone()));
        }
        let (_, sdk) = self.sdk(place).await?;
        let ports = self.ports_over(&sdk);
        built.insert(place.clone(), ports.clone());
        tracing::info!(place = %place, "member ports built");
        Ok(Some(ports))
    }
}
