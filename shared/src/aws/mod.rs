//! AWS adapters implementing the ports with the real SDK.
