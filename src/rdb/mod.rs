//! Moving data between cairn and Redis: values in Redis's RDB encoding
//! (`object`), and the bridge between that model and cairn's rows
//! (`keys`), which DUMP, RESTORE and MIGRATE use.

pub mod file;
pub mod import;
pub mod keys;
pub mod object;
pub mod stream;
