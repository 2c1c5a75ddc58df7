//! User and group names, resolved from the root's own account files.
//!
//! With `--root` the build machine's users mean nothing, so names come from the root's
//! `/etc/passwd` and `/etc/group`. Fedora CoreOS keeps system accounts in `/usr/lib/passwd` and
//! `/usr/lib/group` (nss-altfiles), so those are read too. `root` is uid/gid 0 even with no files.

use std::collections::HashMap;

use super::HostError;
use crate::root::HostRoot;
use crate::types::{AbsPath, AccountRef};

const PASSWD_FILES: [&str; 2] = ["/etc/passwd", "/usr/lib/passwd"];
const GROUP_FILES: [&str; 2] = ["/etc/group", "/usr/lib/group"];

/// Name ↔ id maps for users and groups.
#[derive(Debug, Default)]
pub(crate) struct Accounts {
    users: HashMap<String, u32>,
    groups: HashMap<String, u32>,
    user_names: HashMap<u32, String>,
    group_names: HashMap<u32, String>,
}

impl Accounts {
    /// Reads the account files below `root`. Missing files are fine; unreadable ones are errors.
    pub(crate) fn load(root: &HostRoot) -> Result<Accounts, HostError> {
        let mut acc = Accounts::default();
        for file in PASSWD_FILES {
            for (name, id) in read_db(root, file)? {
                acc.user_names.entry(id).or_insert_with(|| name.clone());
                acc.users.entry(name).or_insert(id);
            }
        }
        for file in GROUP_FILES {
            for (name, id) in read_db(root, file)? {
                acc.group_names.entry(id).or_insert_with(|| name.clone());
                acc.groups.entry(name).or_insert(id);
            }
        }
        acc.users.entry("root".into()).or_insert(0);
        acc.groups.entry("root".into()).or_insert(0);
        acc.user_names.entry(0).or_insert_with(|| "root".into());
        acc.group_names.entry(0).or_insert_with(|| "root".into());
        Ok(acc)
    }

    pub(crate) fn uid(&self, user: &AccountRef) -> Result<u32, HostError> {
        resolve(user, &self.users, "user", &PASSWD_FILES)
    }

    pub(crate) fn gid(&self, group: &AccountRef) -> Result<u32, HostError> {
        resolve(group, &self.groups, "group", &GROUP_FILES)
    }

    /// `name:group` for display, numbers where there is no name.
    pub(crate) fn owner_label(&self, uid: u32, gid: u32) -> String {
        let u = self
            .user_names
            .get(&uid)
            .cloned()
            .unwrap_or_else(|| uid.to_string());
        let g = self
            .group_names
            .get(&gid)
            .cloned()
            .unwrap_or_else(|| gid.to_string());
        format!("{u}:{g}")
    }
}

fn resolve(
    r: &AccountRef,
    names: &HashMap<String, u32>,
    kind: &'static str,
    files: &[&str],
) -> Result<u32, HostError> {
    match r {
        AccountRef::Id(id) => Ok(*id),
        AccountRef::Name(name) => names.get(name).copied().ok_or_else(|| HostError::UnknownAccount {
            kind,
            name: name.clone(),
            files: files.join(" or "),
        }),
    }
}

/// `name:x:id:...` lines of a passwd or group file; malformed lines are skipped as libc does.
fn read_db(root: &HostRoot, file: &str) -> Result<Vec<(String, u32)>, HostError> {
    let abs: AbsPath = file.parse().map_err(HostError::invalid(file, "parse path"))?;
    let text = match super::read::read_text(root, &abs, super::read::Kind::System) {
        Ok(t) => t,
        Err(e) if e.is_missing() => return Ok(Vec::new()),
        Err(e) => return Err(e.into()),
    };
    Ok(parse_db(&text))
}

fn parse_db(text: &str) -> Vec<(String, u32)> {
    text.lines()
        .filter(|l| !l.starts_with('#'))
        .filter_map(|line| {
            let mut fields = line.split(':');
            let name = fields.next()?.trim();
            let id = fields.nth(1)?.parse().ok()?;
            (!name.is_empty()).then(|| (name.to_owned(), id))
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_etc_then_usr_lib_and_always_knows_root() {
        let t = tempfile::tempdir().expect("tempdir");
        std::fs::create_dir_all(t.path().join("etc")).expect("mkdir");
        std::fs::create_dir_all(t.path().join("usr/lib")).expect("mkdir");
        std::fs::write(
            t.path().join("etc/passwd"),
            "core:x:1000:1000::/home/core:/bin/bash\nbroken\n",
        )
        .expect("write");
        std::fs::write(
            t.path().join("usr/lib/passwd"),
            "etcd:x:232:232::/:/sbin/nologin\ncore:x:9:9::/:/bin/sh\n",
        )
        .expect("write");
        std::fs::write(t.path().join("usr/lib/group"), "etcd:x:232:\n").expect("write");
        let acc = Accounts::load(&HostRoot::at(t.path())).expect("load");
        assert_eq!(
            acc.uid(&AccountRef::Name("core".into())).expect("core"),
            1000,
            "/etc wins"
        );
        assert_eq!(acc.uid(&AccountRef::Name("etcd".into())).expect("etcd"), 232);
        assert_eq!(acc.gid(&AccountRef::Name("etcd".into())).expect("etcd"), 232);
        assert_eq!(acc.uid(&AccountRef::Name("root".into())).expect("root"), 0);
        assert_eq!(acc.owner_label(232, 232), "etcd:etcd");
        assert_eq!(acc.owner_label(4242, 0), "4242:root");
        let err = acc
            .uid(&AccountRef::Name("nobody2".into()))
            .expect_err("unknown")
            .to_string();
        assert!(
            err.contains("nobody2") && err.contains("/usr/lib/passwd"),
            "{err}"
        );
    }
}
