//! The WAL archive of a repository: log backups pushed by `archive_command` and
//! fetched by `restore_command`.
