//! Lambda handlers: the code path shared by each function and `nodecycle run`.
