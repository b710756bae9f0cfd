//! A planned file's path, compact: its directory shared with the files beside it, its
//! name inline when short (most are).

use smallvec::SmallVec;
use std::ffi::OsStr;
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};
use std::sync::Arc;

#[derive(Clone, Debug)]
pub struct FilePath {
    /// A thin pointer: eight bytes a file.
    dir: Arc<PathBuf>,
    name: SmallVec<[u8; 16]>,
}

impl FilePath {
    /// `name` in `dir`; files of one directory share one `dir`.
    pub fn new(dir: Arc<PathBuf>, name: &OsStr) -> FilePath {
        FilePath {
            dir,
            name: SmallVec::from_slice(name.as_bytes()),
        }
    }

    /// The path to open.
    pub fn full(&self) -> PathBuf {
        self.dir.join(OsStr::from_bytes(&self.name))
    }

    pub fn dir(&self) -> &Arc<PathBuf> {
        &self.dir
    }
}

/// Paths of a walk, each file's directory shared with the file before it when the same.
#[derive(Default)]
pub struct Dirs(Option<Arc<PathBuf>>);

impl Dirs {
    pub fn file(&mut self, p: &Path) -> FilePath {
        let (Some(dir), Some(name)) = (p.parent(), p.file_name()) else {
            return p.to_path_buf().into();
        };
        let shared = match &self.0 {
            Some(d) if d.as_path() == dir => d.clone(),
            _ => self.0.insert(Arc::new(dir.to_path_buf())).clone(),
        };
        FilePath::new(shared, name)
    }
}

impl From<PathBuf> for FilePath {
    fn from(p: PathBuf) -> FilePath {
        match (p.parent(), p.file_name()) {
            (Some(dir), Some(name)) => FilePath::new(Arc::new(dir.to_path_buf()), name),
            _ => FilePath::new(Arc::default(), p.as_os_str()),
        }
    }
}

impl std::fmt::Display for FilePath {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        self.full().display().fmt(f)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_path_is_its_directory_and_name() {
        let long = "a-name-longer-than-sixteen-bytes";
        for p in ["/d/e/f00001", "f", &format!("/d/{long}")] {
            let fp = FilePath::from(PathBuf::from(p));
            assert_eq!(
                (fp.full(), fp.to_string()),
                (PathBuf::from(p), p.to_string())
            );
        }
        let dir = Arc::new(PathBuf::from("/x"));
        let (a, b) = (
            FilePath::new(dir.clone(), "a".as_ref()),
            FilePath::new(dir, "b".as_ref()),
        );
        assert!(Arc::ptr_eq(a.dir(), b.dir()));
        let mut dirs = Dirs::default();
        let (c, d) = (dirs.file(Path::new("/y/c")), dirs.file(Path::new("/y/d")));
        assert!(Arc::ptr_eq(c.dir(), d.dir()) && d.full() == Path::new("/y/d"));
        assert_eq!(b.full(), Path::new("/x/b"));
        // A plan holds one a file: a shared directory and a short name inline.
        assert_eq!(std::mem::size_of::<FilePath>(), 32);
    }
}
