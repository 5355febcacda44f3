//! Budget engine tests.
