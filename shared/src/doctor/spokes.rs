//! `nodecycle doctor`'s reads of a member, through its spoke role (the AWS and Kubernetes
//! adapters of [`super::members`]' ports).

use async_trait::async_trait;

use crate::aws::members::AwsMembers;

/// doctor's reads in one account and region (a member's, through its spoke role).
pub struct Reads {
    stacks: crate::aws::cloudformation::Stacks,
    inventory: crate::aws::inventory::Inventory,
    ssm: crate::aws::ssm::Ssm,
    rbac: crate::kube::rbac::EksRbac,
    rules: crate::aws::event_rules::Rules,
    node_types: crate::aws::nodegroup::NodeGroups,
}

impl Reads {
    /// The reads over `config`.
    pub fn new(config: &aws_config::SdkConfig) -> Reads {
        let clients = crate::aws::Clients::new(config);
        Reads {
            stacks: crate::aws::cloudformation::Stacks::from_config(config),
            inventory: crate::aws::inventory::Inventory::new(clients.clone()),
            ssm: crate::aws::ssm::Ssm::new(clients.ssm.clone()),
            rbac: crate::kube::rbac::EksRbac::new(config.clone()),
            rules: crate::aws::event_rules::Rules::from_config(config),
            node_types: crate::aws::nodegroup::NodeGroups::new(
                clients.autoscaling.clone(),
                clients.ec2.clone(),
                clients.eks.clone(),
            ),
        }
    }
}

impl crate::doctor::members::MemberReads for Reads {
    fn ports(&self) -> crate::doctor::run::Ports<'_> {
        crate::doctor::run::Ports {
            stack: &self.stacks,
            table: &self.inventory,
            policies: &self.ssm,
            groups: &self.inventory,
            clusters: &self.inventory,
            rbac: &self.rbac,
            pods: &self.rbac,
            rules: &self.rules,
            node_types: &self.node_types,
            findings: &self.inventory,
        }
    }
}

/// Members' spoke roles, assumed as the functions assume them.
pub struct Spokes(pub AwsMembers);

#[async_trait]
impl crate::doctor::members::SpokeRoles for Spokes {
    async fn assume(
        &self,
        place: &crate::policy::Place,
    ) -> (
        String,
        Result<Box<dyn crate::doctor::members::MemberReads>, crate::port::PortError>,
    ) {
        match self.0.sdk(place).await {
            Ok((role, config)) => (role, Ok(Box::new(Reads::new(&config)))),
            Err(e) => (
                e.role.clone().unwrap_or_default(),
                Err(crate::port::PortError::new(
                    "sts:AssumeRole",
                    crate::port::ErrorKind::Other,
                    e.to_string(),
                )),
            ),
        }
    }

    async fn expected(
        &self,
        place: &crate::policy::Place,
    ) -> Result<crate::doctor::members::Expected, crate::port::PortError> {
        use crate::ports::Members;
        let cell = self.0.cell().await?;
        Ok(crate::doctor::members::expected(
            place,
            &cell.account,
            &self.0.member_config(),
        ))
    }
}
