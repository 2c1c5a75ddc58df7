//! The one decision about the kubelet container, made by `plan` and by the supervisor alike: given
//! what runs now and the spec wanted, start, replace a stale one, replace, or adopt (nothing to do).

use std::fmt;

use super::runtime::Container;
use super::spec::Desired;
use crate::plan::KubeletOp;

/// What to do with the container, given what runs now; `None` adopts the one there.
pub fn decide(existing: Option<&Container>, want: &Desired) -> Option<KubeletOp> {
    match existing {
        None => Some(KubeletOp::Start),
        Some(c) if !c.running => Some(KubeletOp::ReplaceStale),
        Some(c) if c.spec_hash.as_deref() == Some(want.hash.as_str()) => None,
        Some(_) => Some(KubeletOp::Replace),
    }
}

/// The container a decision was made about, so the decision can be checked before it is carried
/// out: a plan made a while ago must not stop a container that was not the one it saw.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Seen {
    None,
    Container { id: String, running: bool },
}

impl Seen {
    pub fn of(existing: Option<&Container>) -> Seen {
        match existing {
            None => Seen::None,
            Some(c) => Seen::Container {
                id: c.id.clone(),
                running: c.running,
            },
        }
    }
}

impl fmt::Display for Seen {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Seen::None => f.write_str("no container"),
            Seen::Container { id, running } => {
                let state = if *running { "running" } else { "exited" };
                write!(f, "container {} ({state})", super::short_id(id))
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::kubelet::spec::KubeletSpec;

    fn want(hash: &str) -> Desired {
        Desired {
            spec: KubeletSpec::default(),
            hash: hash.into(),
            healthz: None,
            pull_from: Vec::new(),
        }
    }

    fn container(running: bool, hash: Option<&str>) -> Container {
        Container {
            id: "0123456789abcdef".into(),
            running,
            exit_code: None,
            image: "kubelet:1".into(),
            image_id: String::new(),
            started_at: None,
            pid: None,
            spec_hash: hash.map(String::from),
        }
    }

    #[test]
    fn none_there_starts_one() {
        assert_eq!(decide(None, &want("a")), Some(KubeletOp::Start));
    }

    #[test]
    fn an_exited_container_is_replaced_whatever_its_spec() {
        let c = container(false, Some("a"));
        assert_eq!(decide(Some(&c), &want("a")), Some(KubeletOp::ReplaceStale));
    }

    #[test]
    fn the_same_spec_running_is_adopted() {
        let c = container(true, Some("a"));
        assert_eq!(decide(Some(&c), &want("a")), None);
    }

    #[test]
    fn another_spec_or_none_recorded_is_replaced() {
        assert_eq!(
            decide(Some(&container(true, Some("b"))), &want("a")),
            Some(KubeletOp::Replace)
        );
        assert_eq!(
            decide(Some(&container(true, None)), &want("a")),
            Some(KubeletOp::Replace)
        );
    }

    #[test]
    fn seen_tells_containers_apart_by_id_and_state() {
        let running = container(true, Some("a"));
        let exited = container(false, Some("a"));
        assert_eq!(Seen::of(Some(&running)), Seen::of(Some(&running.clone())));
        assert_ne!(Seen::of(Some(&running)), Seen::of(Some(&exited)));
        assert_ne!(Seen::of(Some(&running)), Seen::None);
        assert_eq!(
            Seen::of(Some(&running)).to_string(),
            "container 0123456789ab (running)"
        );
        assert_eq!(Seen::None.to_string(), "no container");
    }
}
