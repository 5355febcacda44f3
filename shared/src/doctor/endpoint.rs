//! Can the functions that reach Kubernetes (rotator, interruption handler, ops) reach a cluster's
//! Kubernetes API endpoint, given how the endpoint is exposed (`resourcesVpcConfig`) and whether
//! the stack puts those functions in a VPC (stack output [`FUNCTION_SUBNETS`]).
//!
//! Judged from configuration only: doctor runs with the operator's credentials, not from the
//! functions' network, so routes, security groups and NAT addresses are named in the fix, never
//! verified (docs/operations.md, Private clusters).

use super::port::EndpointAccess;
use super::{Check, CheckKind};

/// Stack output: the functions' subnets (`VpcSubnetIds`, comma-separated; empty: no VPC).
pub const FUNCTION_SUBNETS: &str = "FunctionSubnetIds";

/// Where the functions that reach Kubernetes run.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum FunctionNetwork {
    /// Outside any VPC: Lambda's own egress, public addresses that are not fixed. A stack without
    /// the [`FUNCTION_SUBNETS`] output (older templates had no VPC settings) is this too.
    Outside,
    /// In these subnets (`VpcSubnetIds`).
    Vpc(Vec<String>),
}

impl FunctionNetwork {
    /// From the [`FUNCTION_SUBNETS`] output (`None`: the output is missing).
    pub fn from_output(value: Option<&str>) -> Self {
        let subnets: Vec<String> = value
            .unwrap_or_default()
            .split(',')
            .map(str::trim)
            .filter(|s| !s.is_empty())
            .map(str::to_owned)
            .collect();
        if subnets.is_empty() {
            FunctionNetwork::Outside
        } else {
            FunctionNetwork::Vpc(subnets)
        }
    }
}

const ANY: &str = "0.0.0.0/0";
const VPC_FIX: &str = "update the stack with VpcSubnetIds and VpcSecurityGroupIds (subnets routed to the \
                       cluster's VPC; the cluster security group admitting that security group on 443) \
                       and VPC endpoints or a NAT gateway for the AWS APIs: docs/operations.md, Private clusters";

/// The `endpoint` check of `cluster`; `None` when EKS reported no endpoint access (nothing to
/// judge). Fails when the endpoint is private-only and the functions run outside a VPC; warns
/// when the public endpoint admits only `publicAccessCidrs` and the functions' source address
/// cannot be known to be in them.
pub fn check(
    cluster: &str,
    endpoint: Option<&EndpointAccess>,
    network: &FunctionNetwork,
) -> Option<Check> {
    let e = endpoint.filter(|e| e.public || e.private)?;
    let restricted: Vec<&str> = e
        .public_cidrs
        .iter()
        .map(String::as_str)
        .filter(|c| *c != ANY)
        .collect();
    let open = e.public && (e.public_cidrs.is_empty() || e.public_cidrs.iter().any(|c| c == ANY));
    let kind = CheckKind::Endpoint;
    Some(match (network, e.public, e.private) {
        (_, true, _) if open => Check::ok(kind, cluster, "public endpoint, open to any address"),
        (FunctionNetwork::Outside, false, _) => Check::fail(
            kind,
            cluster,
            "private-only endpoint, and the functions run outside any VPC: they cannot reach it",
            VPC_FIX,
        ),
        (FunctionNetwork::Outside, true, private) => Check::warn(
            kind,
            cluster,
            format!(
                "public endpoint limited to publicAccessCidrs {}{}; the functions run outside any VPC, \
                 from Lambda addresses that are not fixed",
                restricted.join(","),
                if private {
                    " (private endpoint on)"
                } else {
                    ""
                }
            ),
            format!(
                "{VPC_FIX}; with the private endpoint off, the NAT gateway's addresses must be in \
                 publicAccessCidrs"
            ),
        ),
        (FunctionNetwork::Vpc(subnets), _, true) => Check::ok(
            kind,
            cluster,
            format!(
                "{} endpoint; the functions run in {} (doctor cannot see routes: the subnets must reach \
                 the cluster's VPC, its security group admit the functions' on 443)",
                if e.public {
                    "private and public"
                } else {
                    "private-only"
                },
                subnets.join(",")
            ),
        ),
        (FunctionNetwork::Vpc(subnets), _, false) => Check::warn(
            kind,
            cluster,
            format!(
                "public endpoint limited to publicAccessCidrs {}; the functions run in {} and reach it \
                 through their NAT",
                restricted.join(","),
                subnets.join(",")
            ),
            "check that the NAT gateway's public addresses are in publicAccessCidrs (doctor cannot \
             see them), or enable the cluster's private endpoint",
        ),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::doctor::Status;

    fn access(public: bool, private: bool, cidrs: &[&str]) -> EndpointAccess {
        EndpointAccess {
            public,
            private,
            public_cidrs: cidrs.iter().map(|c| (*c).to_owned()).collect(),
        }
    }

    #[test]
    fn endpoint_cases() {
        let outside = FunctionNetwork::Outside;
        let vpc = FunctionNetwork::Vpc(vec!["subnet-1".into()]);
        let office = ["203.0.113.0/24"];
        let cases: [(EndpointAccess, &FunctionNetwork, Status); 10] = [
            (access(true, false, &[ANY]), &outside, Status::Ok),
            (access(true, false, &[]), &outside, Status::Ok),
            (access(true, true, &[ANY]), &outside, Status::Ok),
            (access(false, true, &[]), &outside, Status::Fail),
            (access(false, true, &[]), &vpc, Status::Ok),
            (access(true, false, &office), &outside, Status::Warn),
            (access(true, true, &office), &outside, Status::Warn),
            (access(true, false, &office), &vpc, Status::Warn),
            (access(true, true, &office), &vpc, Status::Ok),
            (access(true, false, &[ANY]), &vpc, Status::Ok),
        ];
        for (e, network, status) in cases {
            let c = check("prod", Some(&e), network).unwrap();
            assert_eq!(c.status, status, "{e:?} {network:?}: {c}");
            assert_eq!(c.check, CheckKind::Endpoint);
            assert_eq!(c.subject, "prod");
            assert_eq!(c.fix.is_empty(), status == Status::Ok, "{c}");
        }
    }

    #[test]
    fn the_fix_names_the_vpc_settings_and_the_restricted_cidrs() {
        let c = check(
            "prod",
            Some(&access(false, true, &[])),
            &FunctionNetwork::Outside,
        )
        .unwrap();
        assert!(c.fix.contains("VpcSubnetIds") && c.fix.contains("VpcSecurityGroupIds"));
        let c = check(
            "prod",
            Some(&access(true, false, &["203.0.113.0/24", ANY])),
            &FunctionNetwork::Outside,
        )
        .unwrap();
        assert_eq!(c.status, Status::Ok, "0.0.0.0/0 among the CIDRs: open");
        let c = check(
            "prod",
            Some(&access(true, false, &["203.0.113.0/24"])),
            &FunctionNetwork::Outside,
        )
        .unwrap();
        assert!(c.detail.contains("203.0.113.0/24"), "{c}");
        assert!(c.fix.contains("NAT"), "{c}");
    }

    #[test]
    fn no_reported_access_no_check() {
        assert_eq!(check("prod", None, &FunctionNetwork::Outside), None);
        let neither = access(false, false, &[]);
        assert_eq!(
            check("prod", Some(&neither), &FunctionNetwork::Outside),
            None
        );
    }

    #[test]
    fn the_output_decides_the_network() {
        assert_eq!(FunctionNetwork::from_output(None), FunctionNetwork::Outside);
        assert_eq!(
            FunctionNetwork::from_output(Some("")),
            FunctionNetwork::Outside
        );
        assert_eq!(
            FunctionNetwork::from_output(Some(" subnet-a, subnet-b ")),
            FunctionNetwork::Vpc(vec!["subnet-a".into(), "subnet-b".into()])
        );
    }
}
