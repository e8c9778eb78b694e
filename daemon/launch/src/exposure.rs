//! The one rule between writable roots and protected paths, shared by dshd's check before it
//! spawns and the launcher's on the roots it opened.

use std::fmt;
use std::path::{Path, PathBuf};

/// A writable root that would expose a protected path.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Exposure {
    /// The writable root (resolved).
    pub root: PathBuf,
    /// The protected path (resolved).
    pub protected: PathBuf,
    /// "lies inside" or "contains".
    pub relation: &'static str,
}

impl fmt::Display for Exposure {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "the sandbox cannot keep {} read-only: it {} the writable root {}",
            self.protected.display(),
            self.relation,
            self.root.display()
        )
    }
}

/// Refuses a writable root that contains a protected path or, unless it is a private temporary
/// directory dshd made (`tmp`: nothing of the protected path is in it), lies inside one.
pub fn check_exposure(root: &Path, tmp: bool, protected: &[PathBuf]) -> Result<(), Exposure> {
    for path in protected {
        let relation = if path.starts_with(root) {
            "lies inside"
        } else if !tmp && root.starts_with(path) {
            "contains"
        } else {
            continue;
        };
        return Err(Exposure {
            root: root.to_owned(),
            protected: path.clone(),
            relation,
        });
    }
    Ok(())
}
