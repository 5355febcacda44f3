//! Resolution of amiSelectorTerms against AWS through narrow ports.
