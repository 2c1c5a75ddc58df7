//! The node's labels and taints: the role's (Typhoon's) merged with the operator's, by the
//! kubelet's rules (one taint per key and effect; one value per label), and the labels as the one
//! `--node-labels` value the kubelet reads.

use crate::types::{LabelKey, LabelValue, Role, Taint};

/// Typhoon's role labels: `node.kubernetes.io/controller=true` (Typhoon writes
/// `controller="true"`; systemd strips the quotes, so the kubelet sees this) or
/// `node.kubernetes.io/node`.
pub(crate) fn role_labels(role: Role) -> Vec<(LabelKey, LabelValue)> {
    let (key, value) = match role {
        Role::Controller => ("node.kubernetes.io/controller", "true"),
        Role::Worker => ("node.kubernetes.io/node", ""),
    };
    key.parse().ok().zip(value.parse().ok()).into_iter().collect()
}

/// Typhoon's role taints: controllers keep workloads off with
/// `node-role.kubernetes.io/controller`.
pub(crate) fn role_taints(role: Role) -> Vec<Taint> {
    match role {
        Role::Controller => "node-role.kubernetes.io/controller=:NoSchedule"
            .parse()
            .ok()
            .into_iter()
            .collect(),
        Role::Worker => Vec::new(),
    }
}

/// The taints the node registers with: the role's, then the user's, each `(key, effect)` once. The
/// kubelet refuses a list with two taints of the same key and effect, so the same taint twice is
/// kept once, and two values for one key and effect are an error naming both.
/// Two taints the kubelet cannot both register: one key and effect, two values.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error(
    "{first} and {second} have the same key and effect; the kubelet registers one taint per key and effect \
     (and refuses to start with both)"
)]
pub(crate) struct TaintConflict {
    pub(crate) first: Taint,
    pub(crate) second: Taint,
}

pub(crate) fn merge_taints(role: &[Taint], user: &[Taint]) -> Result<Vec<Taint>, TaintConflict> {
    let mut out: Vec<Taint> = Vec::new();
    for t in role.iter().chain(user) {
        match out
            .iter()
            .find(|o| o.key() == t.key() && o.effect() == t.effect())
        {
            Some(o) if o.value() == t.value() => {}
            Some(o) => {
                return Err(TaintConflict {
                    first: o.clone(),
                    second: t.clone(),
                });
            }
            None => out.push(t.clone()),
        }
    }
    Ok(out)
}

/// The labels the node registers with: the role's, then the user's, each key once. The same label
/// twice is kept once; another value for a role label is an error naming the key (the kubelet would
/// keep the last).
pub(crate) fn merge_labels(
    role: &[(LabelKey, LabelValue)],
    user: &[(LabelKey, LabelValue)],
) -> Result<Vec<(LabelKey, LabelValue)>, (LabelKey, String)> {
    let mut out: Vec<(LabelKey, LabelValue)> = Vec::new();
    for (k, v) in role.iter().chain(user) {
        match out.iter().find(|(o, _)| o == k) {
            Some((_, ov)) if ov == v => {}
            Some((_, ov)) => {
                return Err((
                    k.clone(),
                    format!("{k}={v}: the role already sets {k}={ov}; a node has one value per label"),
                ));
            }
            None => out.push((k.clone(), v.clone())),
        }
    }
    Ok(out)
}

/// `key=value` pairs as one `--node-labels` value (an empty value as the bare key, as Typhoon
/// writes `node.kubernetes.io/node`).
pub(crate) fn labels_flag(labels: &[(LabelKey, LabelValue)]) -> String {
    let items: Vec<String> = labels
        .iter()
        .map(|(k, v)| match v.to_string().as_str() {
            "" => k.to_string(),
            v => format!("{k}={v}"),
        })
        .collect();
    items.join(",")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn taints(list: &[&str]) -> Vec<Taint> {
        list.iter().map(|t| t.parse().expect("taint")).collect()
    }

    #[test]
    fn role_labels_and_taints_are_typhoons() {
        assert_eq!(labels_flag(&role_labels(Role::Worker)), "node.kubernetes.io/node");
        assert_eq!(
            labels_flag(&role_labels(Role::Controller)),
            "node.kubernetes.io/controller=true"
        );
        assert!(role_taints(Role::Worker).is_empty());
        let t = role_taints(Role::Controller);
        assert_eq!(t.len(), 1);
        assert_eq!(
            (t[0].key(), t[0].value(), t[0].effect()),
            ("node-role.kubernetes.io/controller", "", "NoSchedule")
        );
    }

    #[test]
    fn taints_merge_once_per_key_and_effect() {
        let role = taints(&["node-role.kubernetes.io/controller=:NoSchedule"]);
        let user = taints(&[
            "example.com/dedicated=infra:NoSchedule",
            "node-role.kubernetes.io/controller:NoSchedule",
            "example.com/dedicated=infra:NoExecute",
        ]);
        let merged: Vec<String> = merge_taints(&role, &user)
            .expect("merge")
            .iter()
            .map(|t| t.to_string())
            .collect();
        assert_eq!(
            merged,
            [
                "node-role.kubernetes.io/controller=:NoSchedule",
                "example.com/dedicated=infra:NoSchedule",
                "example.com/dedicated=infra:NoExecute"
            ]
        );
        let err = merge_taints(&[], &taints(&["k=a:NoSchedule", "k=b:NoSchedule"])).expect_err("conflict");
        assert_eq!(err.second.to_string(), "k=b:NoSchedule");
        assert!(err.to_string().contains("same key and effect"), "{err}");
    }

    #[test]
    fn labels_merge_once_per_key() {
        let l = |k: &str, v: &str| {
            (
                k.parse::<LabelKey>().expect("k"),
                v.parse::<LabelValue>().expect("v"),
            )
        };
        let role = [l("node.kubernetes.io/node", "")];
        let merged = merge_labels(
            &role,
            &[l("node.kubernetes.io/node", ""), l("example.com/pool", "gpu")],
        )
        .expect("merge");
        assert_eq!(
            labels_flag(&merged),
            "node.kubernetes.io/node,example.com/pool=gpu"
        );
        assert!(merge_labels(&role, &[l("node.kubernetes.io/node", "x")]).is_err());
    }
}
