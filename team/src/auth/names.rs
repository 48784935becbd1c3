//! `--user-map`: the names people sign in with (an identity provider's `ana@lab.example.org`) mapped to
//! the names gpudash's owners go by (the Unix, Slurm or pod-label `ana`), so usage, bookings and stop rights
//! follow the person whichever way they signed in.

use std::collections::HashMap;
use std::path::Path;

use serde::Deserialize;

use super::valid_user;

/// Sign-in name → owner name.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct UserMap {
    names: HashMap<String, String>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct File {
    users: HashMap<String, String>,
}

/// Why a user map was refused; start-up stops with it.
#[derive(Debug, thiserror::Error)]
pub enum UserMapError {
    #[error("cannot read the user map {path}: {source}")]
    Read { path: String, source: std::io::Error },
    #[error("the user map {path} is not a [users] table of \"sign-in name\" = \"owner name\" lines: {source}")]
    Parse { path: String, source: toml::de::Error },
    #[error(
        "the user map {path} maps '{from}' to '{to}': both must be 1–64 letters, digits or . _ - @ (the owner name as \
         Unix, Slurm or the pod label spells it)"
    )]
    BadName { path: String, from: String, to: String },
}

impl UserMap {
    pub fn load(path: &Path) -> Result<Self, UserMapError> {
        let shown = path.display().to_string();
        let text =
            std::fs::read_to_string(path).map_err(|source| UserMapError::Read { path: shown.clone(), source })?;
        Self::parse(&text, &shown)
    }

    fn parse(text: &str, path: &str) -> Result<Self, UserMapError> {
        let file: File =
            toml::from_str(text).map_err(|source| UserMapError::Parse { path: path.to_owned(), source })?;
        for (from, to) in &file.users {
            if valid_user(from).is_err() || valid_user(to).is_err() {
                return Err(UserMapError::BadName { path: path.to_owned(), from: from.clone(), to: to.clone() });
            }
        }
        Ok(Self { names: file.users })
    }

    /// The owner name of someone who signed in as `name` (the name itself where the map has none).
    pub fn owner<'a>(&'a self, name: &'a str) -> &'a str {
        self.names.get(name).map_or(name, String::as_str)
    }

    pub fn len(&self) -> usize {
        self.names.len()
    }

    pub fn is_empty(&self) -> bool {
        self.names.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn mapped_names_become_owner_names_and_others_stay() {
        let map = UserMap::parse("[users]\n\"ana@lab.example.org\" = \"ana\"\n", "users.toml").unwrap();
        assert_eq!(map.owner("ana@lab.example.org"), "ana");
        assert_eq!(map.owner("bo"), "bo");
        assert_eq!(map.len(), 1);
    }

    #[test]
    fn bad_maps_say_what_is_wrong() {
        let refused = |text: &str| UserMap::parse(text, "users.toml").unwrap_err().to_string();
        assert!(refused("[users]\n\"ana@lab\" = \"ana smith\"\n").contains("maps 'ana@lab' to 'ana smith'"));
        assert!(refused("ana = \"x\"\n").contains("[users] table"));
        assert!(refused("[users]\nana = 3\n").contains("[users] table"));
    }
}
