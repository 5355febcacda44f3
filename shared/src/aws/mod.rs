//! AWS adapters: each implements one port with the real SDK and translates SDK errors into
//! [`PortError`]s. Nothing outside this module sees SDK types.

pub mod autoscaling;
#[cfg(all(feature = "lambda", feature = "kube"))]
pub mod caller;
#[cfg(feature = "doctor")]
pub mod cloudformation;
pub mod cloudwatch;
pub mod dynamodb;
pub mod ec2;
pub mod eks;
pub mod eks_nodegroups;
#[cfg(feature = "doctor")]
pub mod event_rules;
pub mod events_out;
pub mod identity;
pub mod instances;
pub mod inventory;
pub mod members;
pub mod nodegroup;
pub mod queue;
pub mod ssm;
mod template;

use aws_sdk_ssm::config::http::HttpResponse;
use aws_sdk_ssm::error::{ProvideErrorMetadata, SdkError};

use crate::port::{ErrorKind, PortError, credentials_hint, error_chain};

/// Every AWS client nodecycle uses, built once per process from one SDK configuration.
#[derive(Clone, Debug)]
pub struct Clients {
    /// SSM.
    pub ssm: aws_sdk_ssm::Client,
    /// EC2.
    pub ec2: aws_sdk_ec2::Client,
    /// EKS.
    pub eks: aws_sdk_eks::Client,
    /// DynamoDB.
    pub dynamodb: aws_sdk_dynamodb::Client,
    /// Auto Scaling.
    pub autoscaling: aws_sdk_autoscaling::Client,
    /// CloudWatch (promotion alarms).
    pub cloudwatch: aws_sdk_cloudwatch::Client,
    /// EventBridge (events out, PutEvents on the default bus).
    pub events: aws_sdk_eventbridge::Client,
}

impl Clients {
    /// Builds every client from `config`.
    pub fn new(config: &aws_config::SdkConfig) -> Self {
        Self {
            ssm: aws_sdk_ssm::Client::new(config),
            ec2: aws_sdk_ec2::Client::new(config),
            eks: aws_sdk_eks::Client::new(config),
            dynamodb: aws_sdk_dynamodb::Client::new(config),
            autoscaling: aws_sdk_autoscaling::Client::new(config),
            cloudwatch: aws_sdk_cloudwatch::Client::new(config),
            events: aws_sdk_eventbridge::Client::new(config),
        }
    }
}

/// Attempts per AWS call (the SDK's standard retry mode, exponential backoff with jitter):
/// throttling slows a pass down rather than failing it.
pub const MAX_ATTEMPTS: u32 = 10;

/// Loads the SDK configuration from the environment (region, credentials, `AWS_ENDPOINT_URL`),
/// with [`MAX_ATTEMPTS`] per call.
pub async fn load_config() -> aws_config::SdkConfig {
    load_config_with(None, None, MAX_ATTEMPTS).await
}

/// [`load_config`] with `region` and `profile` (a profile of the shared config files) in place
/// of the environment's when given, and `attempts` per call (the CLI makes fewer, so that a
/// wrong endpoint fails in seconds, not a minute).
pub async fn load_config_with(
    region: Option<&str>,
    profile: Option<&str>,
    attempts: u32,
) -> aws_config::SdkConfig {
    let mut loader = aws_config::defaults(aws_config::BehaviorVersion::latest())
        .retry_config(aws_config::retry::RetryConfig::standard().with_max_attempts(attempts));
    if let Some(profile) = profile {
        loader = loader.profile_name(profile);
    }
    if let Some(region) = region {
        loader = loader.region(aws_config::Region::new(region.to_string()));
    }
    loader.load().await
}

/// Classifies an AWS error code.
pub(crate) fn kind_of_code(code: &str) -> ErrorKind {
    match code {
        "ParameterNotFound"
        | "ResourceNotFoundException"
        | "InvalidAMIID.NotFound"
        | "InvalidAMIID.Unavailable"
        | "InvalidLaunchTemplateId.NotFound"
        | "InvalidLaunchTemplateName.NotFoundException"
        | "InvalidInstanceID.NotFound"
        | "NotFoundException" => ErrorKind::NotFound,
        "ConditionalCheckFailedException"
        | "TransactionConflictException"
        | "ResourceInUseException" => ErrorKind::Conflict,
        "ThrottlingException"
        | "Throttling"
        | "RequestLimitExceeded"
        | "ProvisionedThroughputExceededException"
        | "RequestThrottled"
        | "RequestThrottledException"
        | "TooManyRequestsException"
        | "TooManyUpdates" => ErrorKind::Throttled,
        "InternalServerError"
        | "InternalFailure"
        | "InternalError"
        | "ServiceUnavailable"
        | "ServerException" => ErrorKind::Transient,
        "AccessDeniedException"
        | "AccessDenied"
        | "UnauthorizedOperation"
        | "UnrecognizedClientException"
        | "InvalidClientTokenId"
        | "ExpiredToken"
        | "ExpiredTokenException" => ErrorKind::AccessDenied,
        "ValidationError"
        | "ValidationException"
        | "InvalidParameterException"
        | "InvalidParameterValue"
        | "InvalidParameterCombination"
        | "InvalidRequestException"
        | "InvalidParameterValueException" => ErrorKind::Invalid,
        _ => ErrorKind::Other,
    }
}

/// Classifies a service error without a recognised code by its HTTP status.
fn kind_of_status(status: u16) -> ErrorKind {
    match status {
        429 => ErrorKind::Throttled,
        500..=599 => ErrorKind::Transient,
        403 => ErrorKind::AccessDenied,
        404 => ErrorKind::NotFound,
        409 => ErrorKind::Conflict,
        _ => ErrorKind::Other,
    }
}

/// Translates an SDK error into a [`PortError`] for operation `op` (e.g. `ssm:GetParameters`):
/// by the service's error code, else (no code, e.g. a bare 503) by the HTTP status.
pub(crate) fn port_error<E>(op: &str, err: SdkError<E, HttpResponse>) -> PortError
where
    E: ProvideErrorMetadata + std::error::Error + Send + Sync + 'static,
{
    match &err {
        SdkError::ServiceError(service) => {
            let e = service.err();
            let status = service.raw().status().as_u16();
            let code = e.code().unwrap_or("Unknown");
            let message = e.message().unwrap_or("no message");
            let kind = match (e.code(), kind_of_code(code)) {
                (Some(_), k) if k != ErrorKind::Other => k,
                _ => kind_of_status(status),
            };
            PortError::new(op, kind, format!("{code} (HTTP {status}): {message}"))
        }
        _ => {
            let chain = error_chain(&err);
            if let Some(hint) = credentials_hint(&chain) {
                return PortError::new(op, ErrorKind::AccessDenied, format!("{hint} ({chain})"));
            }
            let kind = match &err {
                SdkError::TimeoutError(_)
                | SdkError::DispatchFailure(_)
                | SdkError::ResponseError(_) => ErrorKind::Transient,
                _ => ErrorKind::Other,
            };
            PortError::new(op, kind, chain)
        }
    }
}
