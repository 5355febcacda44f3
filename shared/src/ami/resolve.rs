//! Resolution of a pool's `amiSelectorTerms` against AWS through narrow ports
//! (Karpenter's AMI selection; docs/concepts.md, "The desired AMI and how it is resolved"). One [`Resolver`] serves one pass: it memoises every SSM
//! parameter, image query and cluster version, so a pass costs one call per distinct
//! alias/term/cluster, not one per pool.
//!
//! (Slightly over 600 lines on purpose: the resolver, its memo and the four ports it reads are
//! one piece; splitting them would scatter the resolution order across files.)

use std::borrow::Borrow;
use std::collections::{BTreeMap, HashMap};
use std::hash::Hash;
use std::sync::Mutex;

use async_trait::async_trait;
use chrono::{DateTime, Utc};
use serde::Serialize;

use super::alias::VersionGateError;
use super::select::{self, Candidate, Image, Provenance};
use super::{Architecture, Variant};
use crate::policy::{NodeGroup, Policy, SelectorTerm};
use crate::port::PortError;

/// One SSM parameter as read: its value and version (a version only grows: a lower one than
/// seen before is a stale read).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Parameter {
    /// The value.
    pub value: String,
    /// The version.
    pub version: i64,
}

/// SSM Parameter Store reads.
#[async_trait]
pub trait ParameterStore: Send + Sync {
    /// The named parameters (names or ARNs, at most 10 per call is the adapter's business). A
    /// name missing from the returned map does not exist.
    async fn get_parameters(
        &self,
        names: &[String],
    ) -> Result<HashMap<String, Parameter>, PortError>;
}

/// An EC2 DescribeImages query, always sent with `state=available` and `IncludeDeprecated`.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Default, Serialize)]
pub struct ImageQuery {
    /// `image-id` filter values.
    pub image_ids: Vec<String>,
    /// `Owners` (empty = not sent).
    pub owners: Vec<String>,
    /// `name` filter (EC2 wildcards pass through).
    pub name: Option<String>,
    /// Tag filters; a value of `*` becomes a `tag-key` filter.
    pub tags: Vec<(String, String)>,
}

/// EC2 image reads.
#[async_trait]
pub trait ImageCatalog: Send + Sync {
    /// Every image matching `query`, all pages.
    async fn describe_images(&self, query: &ImageQuery) -> Result<Vec<Image>, PortError>;
}

/// EKS cluster reads.
#[async_trait]
pub trait ClusterCatalog: Send + Sync {
    /// The cluster's Kubernetes `major.minor` version.
    async fn kubernetes_version(&self, cluster: &str) -> Result<String, PortError>;
}

/// Node group reads used when a policy leaves `architecture` unset.
#[async_trait]
pub trait NodeGroupCatalog: Send + Sync {
    /// The image id the node group's current launch template (or launch configuration) uses,
    /// or, for a managed node group without a custom image, the architecture its AMI type
    /// implies. `Ok(None)` when the group exists but names no image.
    async fn current_image(
        &self,
        cluster: &str,
        group: &NodeGroup,
    ) -> Result<GroupImage, PortError>;

    /// The instance types the node group launches (its launch template's, its mixed instances
    /// policy's overrides, or the managed node group's `instanceTypes`) with the architectures
    /// each supports (`ec2:DescribeInstanceTypes`), for [`super::instance_types::check`]. The
    /// default knows none (nothing to check).
    async fn instance_types(
        &self,
        _cluster: &str,
        _group: &NodeGroup,
    ) -> Result<super::instance_types::GroupTypes, PortError> {
        Ok(super::instance_types::GroupTypes::default())
    }
}

/// What a node group currently launches.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum GroupImage {
    /// A specific AMI id (launch template / launch configuration).
    Image(String),
    /// An architecture known without an AMI id (managed node group AMI type).
    Architecture(Architecture),
    /// Nothing usable.
    Unknown,
}

/// Why a pool did not resolve. Every variant says what to fix.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum ResolveError {
    /// eks:DescribeCluster failed.
    #[error("cannot read the Kubernetes version of cluster {cluster:?}: {source}")]
    Cluster {
        /// Cluster name from the policy.
        cluster: String,
        /// The port error.
        source: PortError,
    },
    /// A version gate or malformed version.
    #[error("amiSelectorTerms[0].alias: {0}")]
    Alias(VersionGateError),
    /// No parameter of an alias exists for the cluster's version.
    #[error(
        "amiSelectorTerms[0].alias: {alias} has no AMI published for Kubernetes {version} (none of these parameters exist: {paths}); pin a version that exists for {version} or use @latest"
    )]
    AliasNotPublished {
        /// The alias.
        alias: String,
        /// Cluster version.
        version: String,
        /// Parameters checked, comma-separated.
        paths: String,
    },
    /// SSM failed with anything but not-found.
    #[error("reading SSM parameters failed: {0}")]
    Parameters(PortError),
    /// DescribeImages failed.
    #[error("describing images failed: {0}")]
    Images(PortError),
    /// Architecture unset and not derivable.
    #[error(
        "architecture: not set in the policy and not derivable from node group {group}: {why}; set architecture to x86_64 or arm64"
    )]
    Architecture {
        /// Node group name.
        group: String,
        /// What went wrong.
        why: String,
    },
    /// Terms matched nothing usable for the pool.
    #[error(
        "no AMI matches {architecture}/{variant}: the terms matched {matched} image(s){detail}; the pool keeps its current AMI"
    )]
    NoMatch {
        /// Pool architecture.
        architecture: Architecture,
        /// Pool variant.
        variant: Variant,
        /// How many images the terms matched in total.
        matched: usize,
        /// Extra detail (architectures seen).
        detail: String,
    },
}

/// One resolved AMI as reported to users (CLI `resolve`, state records, logs).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, serde::Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Ami {
    /// `ami-...`.
    pub id: String,
    /// EC2 image name.
    pub name: String,
    /// Image architecture.
    pub architecture: Architecture,
    /// Variant it is known to serve (aliases), `null` when the term says nothing about it.
    pub variant: Option<Variant>,
    /// EC2 CreationDate as reported.
    pub creation_date: String,
    /// Deprecated at resolution time.
    pub deprecated: bool,
    /// Which term (and parameter) produced it.
    pub source: Provenance,
}

impl Ami {
    fn from_candidate(c: &Candidate, pool_variant: Variant, now: DateTime<Utc>) -> Option<Self> {
        let architecture = c.image.architecture?;
        let variant = if c.variants.contains(&pool_variant) {
            Some(pool_variant)
        } else {
            c.variants.first().copied()
        };
        Some(Ami {
            id: c.image.id.clone(),
            name: c.image.name.clone(),
            architecture,
            variant,
            creation_date: c.image.creation_date.clone(),
            deprecated: c.image.is_deprecated(now),
            source: c.source.clone(),
        })
    }
}

/// The answer for one pool.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Resolution {
    /// `<cluster>/<name>`.
    pub pool: String,
    /// Cluster `major.minor`.
    pub kubernetes_version: String,
    /// Pool architecture (policy or node group).
    #[serde(skip)]
    pub architecture: Architecture,
    /// The AMI a launch would use today.
    pub desired: Ami,
    /// Every distinct AMI the terms matched, best first.
    pub candidates: Vec<Ami>,
}

/// Calls made through a [`Resolver`], by operation (for reports and the pass summary).
pub type CallCounts = BTreeMap<&'static str, u32>;

#[derive(Default)]
struct Memo {
    versions: HashMap<String, String>,
    parameters: HashMap<String, Option<Parameter>>,
    images: HashMap<ImageQuery, Vec<Image>>,
    calls: CallCounts,
}

/// Resolves pools through the ports, memoising within one pass.
pub struct Resolver<'a> {
    parameters: &'a dyn ParameterStore,
    images: &'a dyn ImageCatalog,
    clusters: &'a dyn ClusterCatalog,
    groups: &'a dyn NodeGroupCatalog,
    memo: Mutex<Memo>,
}

impl<'a> Resolver<'a> {
    /// A resolver with an empty memo.
    pub fn new(
        parameters: &'a dyn ParameterStore,
        images: &'a dyn ImageCatalog,
        clusters: &'a dyn ClusterCatalog,
        groups: &'a dyn NodeGroupCatalog,
    ) -> Self {
        Self {
            parameters,
            images,
            clusters,
            groups,
            memo: Mutex::new(Memo::default()),
        }
    }

    /// Calls made so far, by operation.
    pub fn calls(&self) -> CallCounts {
        self.lock().calls.clone()
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Memo> {
        // A poisoned memo only means another resolution panicked; the cached data is still valid.
        self.memo
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    fn count(&self, op: &'static str) {
        *self.lock().calls.entry(op).or_insert(0) += 1;
    }

    /// The memo's value for `key` in the map `of` picks, or the result of `fetch` (one call of
    /// `op`), remembered when it succeeds. `fetch` runs only when it is awaited.
    async fn memoised<Q, K, V>(
        &self,
        of: impl Fn(&mut Memo) -> &mut HashMap<K, V>,
        key: &Q,
        op: &'static str,
        fetch: impl Future<Output = Result<V, PortError>>,
    ) -> Result<V, PortError>
    where
        Q: Eq + Hash + ToOwned<Owned = K> + ?Sized,
        K: Eq + Hash + Borrow<Q>,
        V: Clone,
    {
        if let Some(v) = of(&mut self.lock()).get(key) {
            return Ok(v.clone());
        }
        self.count(op);
        let v = fetch.await?;
        of(&mut self.lock()).insert(key.to_owned(), v.clone());
        Ok(v)
    }

    /// The cluster's Kubernetes version (memoised).
    pub async fn kubernetes_version(&self, cluster: &str) -> Result<String, PortError> {
        let fetch = self.clusters.kubernetes_version(cluster);
        self.memoised(|m| &mut m.versions, cluster, "eks:DescribeCluster", fetch)
            .await
    }

    /// Parameter values (memoised); `None` = not found. Fetches only names not seen this pass.
    pub async fn parameters(
        &self,
        names: &[String],
    ) -> Result<HashMap<String, Option<String>>, PortError> {
        Ok(self
            .parameter_versions(names)
            .await?
            .into_iter()
            .map(|(n, p)| (n, p.map(|p| p.value)))
            .collect())
    }

    /// Parameters with their versions (memoised, as [`Self::parameters`]); `None` = not found.
    pub async fn parameter_versions(
        &self,
        names: &[String],
    ) -> Result<HashMap<String, Option<Parameter>>, PortError> {
        let missing: Vec<String> = {
            let memo = self.lock();
            let mut m: Vec<String> = names
                .iter()
                .filter(|n| !memo.parameters.contains_key(*n))
                .cloned()
                .collect();
            m.sort();
            m.dedup();
            m
        };
        for chunk in missing.chunks(10) {
            self.count("ssm:GetParameters");
            let found = self.parameters.get_parameters(chunk).await?;
            let mut memo = self.lock();
            for name in chunk {
                memo.parameters
                    .insert(name.clone(), found.get(name).cloned());
            }
        }
        let memo = self.lock();
        Ok(names
            .iter()
            .map(|n| (n.clone(), memo.parameters.get(n).cloned().flatten()))
            .collect())
    }

    /// Every parameter this resolver read that exists, by name.
    pub fn parameters_read(&self) -> BTreeMap<String, Parameter> {
        self.lock()
            .parameters
            .iter()
            .filter_map(|(n, p)| Some((n.clone(), p.clone()?)))
            .collect()
    }

    /// The images with these ids (memoised per query).
    pub async fn images_with_ids(&self, ids: &[String]) -> Result<Vec<Image>, PortError> {
        let mut ids = ids.to_vec();
        ids.sort();
        ids.dedup();
        self.images(&ImageQuery {
            image_ids: ids,
            ..ImageQuery::default()
        })
        .await
    }

    async fn images(&self, query: &ImageQuery) -> Result<Vec<Image>, PortError> {
        let fetch = self.images.describe_images(query);
        self.memoised(|m| &mut m.images, query, "ec2:DescribeImages", fetch)
            .await
    }

    /// The images with these ids (each described once, in one query).
    async fn images_by_id(
        &self,
        ids: impl Iterator<Item = &String>,
    ) -> Result<Vec<Image>, ResolveError> {
        let mut ids: Vec<String> = ids.cloned().collect();
        ids.sort();
        ids.dedup();
        let query = ImageQuery {
            image_ids: ids,
            ..ImageQuery::default()
        };
        self.images(&query).await.map_err(ResolveError::Images)
    }

    /// Every candidate the policy's terms match, best first, with the cluster version.
    pub async fn candidates(
        &self,
        policy: &Policy,
        now: DateTime<Utc>,
    ) -> Result<(String, Vec<Candidate>), ResolveError> {
        let version = self
            .kubernetes_version(&policy.cluster)
            .await
            .map_err(|source| ResolveError::Cluster {
                cluster: policy.cluster.clone(),
                source,
            })?;
        let mut found: Vec<Candidate> = Vec::new();
        let mut push = |found: &mut Vec<Candidate>, c: Candidate| {
            if let Some(existing) = found.iter_mut().find(|e| e.image.id == c.image.id) {
                if c.source.term < existing.source.term {
                    existing.source = c.source;
                }
                for v in c.variants {
                    if !existing.variants.contains(&v) && !existing.variants.is_empty() {
                        existing.variants.push(v);
                    }
                }
            } else {
                found.push(c);
            }
        };

        if let Some(alias) = policy
            .ami_selector_terms
            .first()
            .and_then(|t| t.alias.as_ref())
        {
            let params = alias.parameters(&version).map_err(ResolveError::Alias)?;
            let names: Vec<String> = params.iter().map(|p| p.path.clone()).collect();
            let values = self
                .parameters(&names)
                .await
                .map_err(ResolveError::Parameters)?;
            let mut by_id: Vec<(String, &super::alias::AliasParameter)> = Vec::new();
            for p in &params {
                if let Some(Some(id)) = values.get(&p.path) {
                    by_id.push((id.clone(), p));
                }
            }
            if by_id.is_empty() {
                return Err(ResolveError::AliasNotPublished {
                    alias: alias.to_string(),
                    version,
                    paths: names.join(", "),
                });
            }
            let images = self.images_by_id(by_id.iter().map(|(id, _)| id)).await?;
            for img in images {
                for (id, p) in &by_id {
                    if *id == img.id {
                        push(
                            &mut found,
                            Candidate {
                                image: img.clone(),
                                variants: p.variants.clone(),
                                source: Provenance {
                                    term: 0,
                                    field: "alias".into(),
                                    value: alias.to_string(),
                                    parameter: Some(p.path.clone()),
                                },
                            },
                        );
                    }
                }
            }
        } else {
            self.term_candidates(&policy.ami_selector_terms, &mut found, &mut push)
                .await?;
        }
        select::sort_best_first(&mut found, now);
        Ok((version, found))
    }

    async fn term_candidates(
        &self,
        terms: &[SelectorTerm],
        found: &mut Vec<Candidate>,
        push: &mut impl FnMut(&mut Vec<Candidate>, Candidate),
    ) -> Result<(), ResolveError> {
        // ids from `id` and `ssmParameter` terms are described together, as upstream does.
        let ssm_names: Vec<String> = terms
            .iter()
            .filter_map(|t| t.ssm_parameter.clone())
            .collect();
        let ssm_values = if ssm_names.is_empty() {
            HashMap::new()
        } else {
            self.parameters(&ssm_names)
                .await
                .map_err(ResolveError::Parameters)?
        };
        let mut id_sources: Vec<(String, Provenance)> = Vec::new();
        for (i, term) in terms.iter().enumerate() {
            if let Some(id) = &term.id {
                id_sources.push((
                    id.clone(),
                    Provenance {
                        term: i,
                        field: "id".into(),
                        value: id.clone(),
                        parameter: None,
                    },
                ));
            } else if let Some(name) = &term.ssm_parameter {
                match ssm_values.get(name) {
                    Some(Some(value)) if value.starts_with("ami-") => id_sources.push((
                        value.clone(),
                        Provenance {
                            term: i,
                            field: "ssmParameter".into(),
                            value: name.clone(),
                            parameter: Some(name.clone()),
                        },
                    )),
                    Some(Some(value)) => tracing::warn!(
                        term = i,
                        parameter = %name,
                        value = %value,
                        "ssmParameter value is not an AMI id; term skipped"
                    ),
                    _ => {
                        tracing::info!(term = i, parameter = %name, "ssmParameter not found; term skipped")
                    }
                }
            }
        }
        for (i, term) in terms.iter().enumerate() {
            if term.id.is_some() || term.ssm_parameter.is_some() || term.alias.is_some() {
                continue;
            }
            let owners = match (&term.owner, &term.name) {
                (Some(o), _) => vec![o.clone()],
                (None, Some(_)) => vec!["self".to_string(), "amazon".to_string()],
                (None, None) => Vec::new(),
            };
            let query = ImageQuery {
                image_ids: Vec::new(),
                owners,
                name: term.name.clone(),
                tags: term
                    .tags
                    .iter()
                    .map(|(k, v)| (k.clone(), v.clone()))
                    .collect(),
            };
            let mut desc = Vec::new();
            if let Some(n) = &term.name {
                desc.push(format!("name={n}"));
            }
            if let Some(o) = &term.owner {
                desc.push(format!("owner={o}"));
            }
            for (k, v) in &term.tags {
                desc.push(format!("tag:{k}={v}"));
            }
            let source = Provenance {
                term: i,
                field: "query".into(),
                value: desc.join(", "),
                parameter: None,
            };
            for img in self.images(&query).await.map_err(ResolveError::Images)? {
                push(
                    found,
                    Candidate {
                        image: img,
                        variants: Vec::new(),
                        source: source.clone(),
                    },
                );
            }
        }
        if !id_sources.is_empty() {
            let ids = id_sources.iter().map(|(id, _)| id);
            for img in self.images_by_id(ids).await? {
                let source = id_sources
                    .iter()
                    .filter(|(id, _)| *id == img.id)
                    .map(|(_, s)| s.clone())
                    .min_by_key(|s| s.term);
                if let Some(source) = source {
                    push(
                        found,
                        Candidate {
                            image: img,
                            variants: Vec::new(),
                            source,
                        },
                    );
                }
            }
        }
        Ok(())
    }

    /// The pool's architecture: from the policy, else from its node group's current image.
    pub async fn architecture(&self, policy: &Policy) -> Result<Architecture, ResolveError> {
        if let Some(a) = policy.architecture {
            return Ok(a);
        }
        let group = match &policy.node_group {
            NodeGroup::AutoScalingGroup(n) | NodeGroup::ManagedNodeGroup(n) => n.clone(),
        };
        self.count("nodegroup:CurrentImage");
        let current = self
            .groups
            .current_image(&policy.cluster, &policy.node_group)
            .await
            .map_err(|e| ResolveError::Architecture {
                group: group.clone(),
                why: e.to_string(),
            })?;
        match current {
            GroupImage::Architecture(a) => Ok(a),
            GroupImage::Unknown => Err(ResolveError::Architecture {
                group,
                why: "its launch template names no image".into(),
            }),
            GroupImage::Image(id) => {
                let query = ImageQuery {
                    image_ids: vec![id.clone()],
                    ..ImageQuery::default()
                };
                let images = self
                    .images(&query)
                    .await
                    .map_err(|e| ResolveError::Architecture {
                        group: group.clone(),
                        why: e.to_string(),
                    })?;
                images.iter().find(|i| i.id == id).and_then(|i| i.architecture).ok_or_else(|| {
                    ResolveError::Architecture {
                        group,
                        why: format!("its current image {id} is not visible or has an unsupported architecture"),
                    }
                })
            }
        }
    }

    /// Resolves one pool: candidates best first, and the desired AMI for its architecture and
    /// variant. Never returns "no AMI": no match is an error.
    pub async fn resolve(
        &self,
        policy: &Policy,
        now: DateTime<Utc>,
    ) -> Result<Resolution, ResolveError> {
        let (kubernetes_version, candidates) = self.candidates(policy, now).await?;
        let architecture = match self.architecture(policy).await {
            Ok(a) => a,
            Err(e) => {
                // The group cannot tell (missing, no image). If every image the terms match has
                // the same architecture, that is the only one this pool could run: use it.
                let mut archs: Vec<Architecture> = candidates
                    .iter()
                    .filter_map(|c| c.image.architecture)
                    .collect();
                archs.sort();
                archs.dedup();
                match archs.as_slice() {
                    [only] => {
                        tracing::warn!(pool = %policy.pool_id(), architecture = %only, reason = %e, "architecture not derivable from the node group; every matched image is {only}, using it");
                        *only
                    }
                    _ => return Err(e),
                }
            }
        };
        let Some(best) = select::choose(&candidates, architecture, policy.variant, now) else {
            let mut archs: Vec<String> = candidates
                .iter()
                .filter_map(|c| c.image.architecture.map(|a| a.to_string()))
                .collect();
            archs.sort();
            archs.dedup();
            let detail = if archs.is_empty() {
                String::new()
            } else {
                format!(" (architectures: {})", archs.join(", "))
            };
            return Err(ResolveError::NoMatch {
                architecture,
                variant: policy.variant,
                matched: candidates.len(),
                detail,
            });
        };
        let desired = Ami::from_candidate(best, policy.variant, now).ok_or_else(|| {
            ResolveError::NoMatch {
                architecture,
                variant: policy.variant,
                matched: candidates.len(),
                detail: String::new(),
            }
        })?;
        let candidates = candidates
            .iter()
            .filter_map(|c| Ami::from_candidate(c, policy.variant, now))
            .collect();
        Ok(Resolution {
            pool: policy.pool_id(),
            kubernetes_version,
            architecture,
            desired,
            candidates,
        })
    }
}
