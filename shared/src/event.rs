//! Classification of incoming EventBridge events (pure).
