//! Test support for nodecycle: a local fake cloud.
//!
//! [`FakeCloud`] starts `tests/fakecloud/server.py`: moto (a real AWS emulator)
//! spoken to over HTTP by the real AWS SDK, plus a control endpoint that seeds
//! fixtures moto cannot create by itself (SSM parameters under `/aws/service`,
//! AMIs with owner/architecture/deprecation, EKS cluster versions). Each
//! `FakeCloud` is its own server process, so tests run in parallel without
//! sharing state. See `tests/fakecloud/README.md` for the control API.

// This crate is test support: a failure here is a broken test setup, and a
// panic with a clear message is the right way to report it.
#![allow(clippy::expect_used, clippy::unwrap_used)]

mod fakecloud;
mod http;

pub use fakecloud::{ACCOUNT_ID, DEFAULT_REGION, FakeCloud, ImageFixture};
