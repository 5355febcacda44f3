//! AMI model and the pure parts of selection: aliases, SSM parameter paths, choosing among
//! matching images. Resolution against AWS (through the [`resolve`] ports) is in `resolve`.

pub mod instance_types;
pub mod resolve;
pub mod select;

pub use crate::image::{Architecture, Variant, alias};
