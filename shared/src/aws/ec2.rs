//! EC2 adapter: DescribeImages.

use async_trait::async_trait;
use aws_sdk_ec2::types::Filter;
use chrono::{DateTime, Utc};

use super::port_error;
use crate::ami::Architecture;
use crate::ami::resolve::{ImageCatalog, ImageQuery};
use crate::ami::select::Image;
use crate::port::PortError;

/// EC2 through the SDK.
#[derive(Clone, Debug)]
pub struct Ec2 {
    client: aws_sdk_ec2::Client,
}

impl Ec2 {
    /// Wraps a client.
    pub fn new(client: aws_sdk_ec2::Client) -> Self {
        Self { client }
    }
}

fn filter(name: &str, values: Vec<String>) -> Filter {
    Filter::builder()
        .name(name)
        .set_values(Some(values))
        .build()
}

fn parse_time(text: Option<&str>) -> Option<DateTime<Utc>> {
    DateTime::parse_from_rfc3339(text?)
        .ok()
        .map(|t| t.with_timezone(&Utc))
}

#[async_trait]
impl ImageCatalog for Ec2 {
    async fn describe_images(&self, query: &ImageQuery) -> Result<Vec<Image>, PortError> {
        let mut filters = vec![filter("state", vec!["available".into()])];
        if !query.image_ids.is_empty() {
            filters.push(filter("image-id", query.image_ids.clone()));
        }
        if let Some(name) = &query.name {
            filters.push(filter("name", vec![name.clone()]));
        }
        for (k, v) in &query.tags {
            if v == "*" {
                filters.push(filter("tag-key", vec![k.clone()]));
            } else {
                filters.push(filter(&format!("tag:{k}"), vec![v.clone()]));
            }
        }
        let mut req = self
            .client
            .describe_images()
            .set_filters(Some(filters))
            .include_deprecated(true)
            .max_results(1000);
        if !query.owners.is_empty() {
            req = req.set_owners(Some(query.owners.clone()));
        }
        let mut pages = req.into_paginator().send();
        let mut out = Vec::new();
        while let Some(page) = pages.next().await {
            let page = page.map_err(|e| port_error("ec2:DescribeImages", e))?;
            for img in page.images() {
                let Some(id) = img.image_id() else { continue };
                out.push(Image {
                    id: id.to_string(),
                    name: img.name().unwrap_or_default().to_string(),
                    architecture: img
                        .architecture()
                        .and_then(|a| Architecture::parse(a.as_str())),
                    creation_date: img.creation_date().unwrap_or_default().to_string(),
                    deprecation_time: parse_time(img.deprecation_time()),
                });
            }
        }
        Ok(out)
    }
}
