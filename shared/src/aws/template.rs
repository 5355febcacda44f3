//! EC2 launch templates: which image a template version launches, and a new version that
//! launches another image (shared by the Auto Scaling and managed node group adapters).

use aws_sdk_ec2::types::RequestLaunchTemplateData;

use super::port_error;
use crate::port::{ErrorKind, PortError};

/// A launch template version as a group names it: id or name, and the version as written
/// (`$Default`, `$Latest` or a number).
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub(crate) struct TemplateSpec {
    pub(crate) id: Option<String>,
    pub(crate) name: Option<String>,
    pub(crate) version: String,
}

impl From<&crate::managed::TemplateRef> for TemplateSpec {
    /// The version a managed node group's template names (none is `$Default`).
    fn from(t: &crate::managed::TemplateRef) -> Self {
        Self {
            id: t.id.clone(),
            name: t.name.clone(),
            version: t.version.clone().unwrap_or_else(|| "$Default".into()),
        }
    }
}

/// One resolved launch template version.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct TemplateVersion {
    pub(crate) template_id: String,
    pub(crate) number: i64,
    pub(crate) image: Option<String>,
    /// The version's instance type, when it names one.
    pub(crate) instance_type: Option<String>,
    /// The version picks instance types by attributes (`InstanceRequirements`).
    pub(crate) by_attributes: bool,
}

/// From this many templates on, [`describe_many`] lists the `$Latest` / `$Default` versions
/// of every template of the Region in pages instead of asking template by template.
pub(crate) const LIST_FROM: usize = 3;

/// Versions per page of the Region-wide listing (the API's limit).
const PAGE: i32 = 200;

fn version_of(v: &aws_sdk_ec2::types::LaunchTemplateVersion) -> TemplateVersion {
    let data = v.launch_template_data();
    TemplateVersion {
        template_id: v.launch_template_id().unwrap_or_default().to_string(),
        number: v.version_number().unwrap_or_default(),
        image: data.and_then(|d| d.image_id()).map(str::to_string),
        instance_type: data
            .and_then(|d| d.instance_type())
            .map(|t| t.as_str().to_string()),
        by_attributes: data.is_some_and(|d| d.instance_requirements().is_some()),
    }
}

/// The versions `specs` name, in as few calls as the answer's pages: with [`LIST_FROM`] or more
/// distinct templates, one paginated listing of the Region's `$Latest` versions and one of the
/// `$Default` versions (each only if some spec names it; pages grow with the Region's
/// templates, never with instances); anything the listing does not hold (a pinned version
/// number, a template made since) and fewer templates are described one by one. Every spec
/// gets an entry.
pub(crate) async fn describe_many(
    ec2: &aws_sdk_ec2::Client,
    specs: &[TemplateSpec],
) -> std::collections::BTreeMap<TemplateSpec, Result<TemplateVersion, PortError>> {
    use std::collections::{BTreeMap, BTreeSet};
    let distinct: BTreeSet<&TemplateSpec> = specs.iter().collect();
    let mut out = BTreeMap::new();
    if distinct.len() >= LIST_FROM {
        for selector in ["$Latest", "$Default"] {
            let wanted: Vec<&TemplateSpec> = distinct
                .iter()
                .copied()
                .filter(|s| s.version == selector)
                .collect();
            if wanted.is_empty() {
                continue;
            }
            match list(ec2, selector).await {
                Ok(listed) => {
                    for spec in wanted {
                        let hit = match (&spec.id, &spec.name) {
                            (Some(id), _) => listed.0.get(id),
                            (None, Some(name)) => listed.1.get(name),
                            (None, None) => None,
                        };
                        if let Some(v) = hit {
                            out.insert(spec.clone(), Ok(v.clone()));
                        }
                    }
                }
                Err(e) => {
                    for spec in wanted {
                        out.insert(spec.clone(), Err(e.clone()));
                    }
                }
            }
        }
    }
    for spec in distinct {
        if !out.contains_key(spec) {
            out.insert(spec.clone(), describe(ec2, spec).await);
        }
    }
    out
}

/// Version `selector` (`$Latest` or `$Default`) of every launch template of the Region, by
/// template id and by template name.
async fn list(
    ec2: &aws_sdk_ec2::Client,
    selector: &str,
) -> Result<
    (
        std::collections::HashMap<String, TemplateVersion>,
        std::collections::HashMap<String, TemplateVersion>,
    ),
    PortError,
> {
    let versions = ec2
        .describe_launch_template_versions()
        .versions(selector)
        .max_results(PAGE)
        .into_paginator()
        .items()
        .send()
        .try_collect()
        .await
        .map_err(|e| port_error("ec2:DescribeLaunchTemplateVersions", e))?;
    let mut by_id = std::collections::HashMap::new();
    let mut by_name = std::collections::HashMap::new();
    for v in &versions {
        let version = version_of(v);
        if let Some(name) = v.launch_template_name() {
            by_name.insert(name.to_string(), version.clone());
        }
        by_id.insert(version.template_id.clone(), version);
    }
    Ok((by_id, by_name))
}

/// Describes the version `t` names (the id wins over the name).
pub(crate) async fn describe(
    ec2: &aws_sdk_ec2::Client,
    t: &TemplateSpec,
) -> Result<TemplateVersion, PortError> {
    let out = ec2
        .describe_launch_template_versions()
        .set_launch_template_id(t.id.clone())
        .set_launch_template_name(if t.id.is_some() { None } else { t.name.clone() })
        .versions(&t.version)
        .send()
        .await
        .map_err(|e| port_error("ec2:DescribeLaunchTemplateVersions", e))?;
    let v = out.launch_template_versions().first().ok_or_else(|| {
        PortError::new(
            "ec2:DescribeLaunchTemplateVersions",
            ErrorKind::NotFound,
            format!(
                "launch template {} version {} not found",
                t.id.as_deref().or(t.name.as_deref()).unwrap_or("?"),
                t.version
            ),
        )
    })?;
    Ok(version_of(v))
}

/// A launch template's tags.
pub(crate) type Tags = std::collections::BTreeMap<String, String>;

fn tags_of_template(t: &aws_sdk_ec2::types::LaunchTemplate) -> Tags {
    t.tags()
        .iter()
        .filter_map(|tag| Some((tag.key()?.to_owned(), tag.value()?.to_owned())))
        .collect()
}

/// Launch template `id`, else `name` (DescribeLaunchTemplates), as the answer's first template.
pub(crate) async fn describe_template(
    ec2: &aws_sdk_ec2::Client,
    id: Option<&str>,
    name: Option<&str>,
) -> Result<Option<aws_sdk_ec2::types::LaunchTemplate>, PortError> {
    let out = ec2
        .describe_launch_templates()
        .set_launch_template_ids(id.map(|id| vec![id.to_string()]))
        .set_launch_template_names(name.filter(|_| id.is_none()).map(|n| vec![n.to_string()]))
        .send()
        .await
        .map_err(|e| port_error("ec2:DescribeLaunchTemplates", e))?;
    Ok(out.launch_templates().first().cloned())
}

/// Templates per DescribeLaunchTemplates call by id.
const TEMPLATES_PER_CALL: usize = 200;

/// The tags of the templates `ids`, [`TEMPLATES_PER_CALL`] a call; a template a call could not
/// read (an error, or gone) has no entry.
pub(crate) async fn tags_of(
    ec2: &aws_sdk_ec2::Client,
    ids: &[String],
) -> std::collections::HashMap<String, Tags> {
    let mut out = std::collections::HashMap::new();
    for chunk in ids.chunks(TEMPLATES_PER_CALL) {
        match ec2
            .describe_launch_templates()
            .set_launch_template_ids(Some(chunk.to_vec()))
            .send()
            .await
        {
            Ok(page) => {
                for t in page.launch_templates() {
                    if let Some(id) = t.launch_template_id() {
                        out.insert(id.to_string(), tags_of_template(t));
                    }
                }
            }
            Err(e) => {
                let e = port_error("ec2:DescribeLaunchTemplates", e);
                tracing::warn!(error = %e, "cannot read the templates' tags; a template write reads its own");
            }
        }
    }
    out
}

/// Fails closed unless template `template_id` is opted in ([`crate::opt_in`]): tagged
/// `nodecycle.dev/managed=true` and not created by EKS for a managed node group (its tags read
/// with ec2:DescribeLaunchTemplates). The refusal is [`ErrorKind::AccessDenied`] for
/// `ec2:CreateLaunchTemplateVersion`, saying which tag to add.
pub(crate) async fn ensure_opted_in(
    ec2: &aws_sdk_ec2::Client,
    template_id: &str,
    seen: Option<&Tags>,
) -> Result<(), PortError> {
    let tags = match seen {
        Some(t) => t.clone(),
        None => describe_template(ec2, Some(template_id), None)
            .await?
            .as_ref()
            .map(tags_of_template)
            .unwrap_or_default(),
    };
    match crate::opt_in::refusal(template_id, &tags) {
        None => Ok(()),
        Some(why) => Err(PortError::new(
            "ec2:CreateLaunchTemplateVersion",
            ErrorKind::AccessDenied,
            why,
        )),
    }
}

/// The version of `t`'s template that launches `image`: `t`'s own version when it already does
/// (`created = false`), else a new version from it with only the image changed, once the
/// template is opted in ([`ensure_opted_in`]; nothing is written otherwise). `seen` is `t`'s
/// version as this pass read it, `tags` the template's tags as it read them (else each is read
/// now).
pub(crate) async fn with_image(
    ec2: &aws_sdk_ec2::Client,
    t: &TemplateSpec,
    seen: Option<TemplateVersion>,
    tags: Option<&Tags>,
    image: &str,
) -> Result<(TemplateVersion, bool), PortError> {
    let current = match seen {
        Some(v) => v,
        None => describe(ec2, t).await?,
    };
    if current.image.as_deref() == Some(image) {
        return Ok((current, false));
    }
    ensure_opted_in(ec2, &current.template_id, tags).await?;
    let out = ec2
        .create_launch_template_version()
        .launch_template_id(&current.template_id)
        .source_version(current.number.to_string())
        .version_description(format!("nodecycle: image {image}"))
        .launch_template_data(RequestLaunchTemplateData::builder().image_id(image).build())
        .send()
        .await
        .map_err(|e| port_error("ec2:CreateLaunchTemplateVersion", e))?;
    let number = out
        .launch_template_version()
        .and_then(|v| v.version_number())
        .ok_or_else(|| {
            PortError::other(
                "ec2:CreateLaunchTemplateVersion",
                "no version number in the response",
            )
        })?;
    Ok((
        TemplateVersion {
            template_id: current.template_id,
            number,
            image: Some(image.to_string()),
            ..current
        },
        true,
    ))
}

/// Makes version `number` the default version of template `template_id` (ModifyLaunchTemplate).
pub(crate) async fn make_default(
    ec2: &aws_sdk_ec2::Client,
    template_id: &str,
    number: &str,
) -> Result<(), PortError> {
    ec2.modify_launch_template()
        .launch_template_id(template_id)
        .default_version(number)
        .send()
        .await
        .map_err(|e| port_error("ec2:ModifyLaunchTemplate", e))?;
    Ok(())
}
