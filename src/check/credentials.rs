//! The node's credentials: every certificate nodeward watches (the cluster's TLS trees, the
//! kubeconfigs, and the kubelet's own client and serving certificates under /var/lib/kubelet/pki)
//! must be valid now and for a while yet.

use super::model::{Check, Outcome};
use super::observe::Observation;
use crate::config::Settings;
use crate::host::cert::EXPIRY_WARNING_DAYS;

pub(crate) const CERTIFICATES: Check = Check {
    name: "certificates",
    why: "an expired certificate is refused by the API server or the kubelet, far from the cause \
          (a node powered off past its kubelet client certificate's expiry cannot rejoin)",
    decide: certificates,
};

/// What to do about an expired kubelet client certificate (docs/operations.md: "Kubelet credentials").
const KUBELET_CLIENT_RECOVERY: &str = "the kubelet's client certificate: `nodeward kubelet stop`, remove \
    /var/lib/kubelet/pki/kubelet-client-current.pem and /var/lib/kubelet/kubeconfig, `nodeward kubelet \
    start`: the kubelet bootstraps again from /etc/kubernetes/kubeconfig (its token must still be valid; \
    approve the CSR if the cluster does not)";

fn certificates(obs: &Observation, _: &Settings) -> Outcome {
    if obs.certificates.is_empty() {
        return Outcome::skipped("no certificates in metrics.certificates");
    }
    let now = i64::try_from(obs.now).unwrap_or(i64::MAX);
    let expected = format!("valid for {EXPIRY_WARNING_DAYS} days or more");
    // The subject is the certificate's own text: escaped (a CN may carry a newline or a terminal
    // escape), as every path is.
    let describe = |c: &crate::host::cert::CertInfo| {
        let days = (c.not_after - now).div_euclid(86_400);
        let one_line =
            |t: &str| crate::text::printable(&t.replace('\n', "\\n").replace('\r', "\\r")).into_owned();
        let (path, subject) = (one_line(&c.path), one_line(&c.subject));
        if c.not_after <= now {
            format!("{path} ({subject}) expired {} days ago", -days)
        } else {
            format!("{path} ({subject}) expires in {days} days")
        }
    };
    let expired: Vec<_> = obs.certificates.iter().filter(|c| c.not_after <= now).collect();
    let soon: Vec<_> = obs
        .certificates
        .iter()
        .filter(|c| c.not_after > now && (c.not_after - now) / 86_400 < EXPIRY_WARNING_DAYS)
        .collect();
    let fix = |list: &[&crate::host::cert::CertInfo]| {
        if list
            .iter()
            .any(|c| c.path.contains("/var/lib/kubelet/pki/kubelet-client"))
        {
            KUBELET_CLIENT_RECOVERY.to_owned()
        } else {
            "renew it: the cluster's certificates come with the assets bundle (Typhoon: terraform apply)"
                .to_owned()
        }
    };
    // One line, however many: the first few named, the rest counted.
    let listed = |list: &[&crate::host::cert::CertInfo]| {
        const SHOWN: usize = 5;
        let mut seen: Vec<String> = list.iter().take(SHOWN).map(|c| describe(c)).collect();
        if list.len() > SHOWN {
            seen.push(format!("and {} more", list.len() - SHOWN));
        }
        seen
    };
    if !expired.is_empty() {
        let seen = listed(&expired);
        return Outcome::fail(seen.join("; "), expected, fix(&expired));
    }
    if !soon.is_empty() {
        let seen = listed(&soon);
        // The kubelet renews its own client certificate at 70–90 % of its life while it runs.
        return Outcome::warn(seen.join("; "), expected, fix(&soon));
    }
    let first = obs.certificates.iter().min_by_key(|c| c.not_after);
    Outcome::pass(
        format!(
            "{} certificate(s), the first to expire: {}",
            obs.certificates.len(),
            first.map(describe).unwrap_or_default()
        ),
        expected,
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::check::model::Status;
    use crate::check::observe::tests::{observation, settings};
    use crate::host::cert::CertInfo;

    fn cert(path: &str, days_left: i64, now: u64) -> CertInfo {
        CertInfo {
            path: path.into(),
            subject: "system:node:worker-0".into(),
            not_after: now as i64 + days_left * 86_400,
        }
    }

    #[test]
    fn a_subject_with_a_newline_is_shown_escaped() {
        let mut o = observation();
        let now = o.now;
        let mut c = cert("/etc/kubernetes/pki/x.crt", -1, now);
        c.subject = "evil\nnodeward: all checks passed\x1b[2J".into();
        o.certificates = vec![c];
        let out = certificates(&o, &settings());
        assert!(
            !out.observed.contains('\n') && !out.observed.contains('\x1b'),
            "{}",
            out.observed
        );
        assert!(out.observed.contains("evil"), "{}", out.observed);
    }

    #[test]
    fn the_kubelets_client_certificate_expired_names_the_recovery() {
        let mut o = observation();
        let now = o.now;
        o.certificates = vec![
            cert("/etc/kubernetes/kubeconfig#certificate-authority-data", 3000, now),
            cert("/var/lib/kubelet/pki/kubelet-client-current.pem", -3, now),
        ];
        let out = certificates(&o, &settings());
        assert_eq!(out.status, Status::Fail);
        assert_eq!(
            out.observed,
            "/var/lib/kubelet/pki/kubelet-client-current.pem (system:node:worker-0) expired 3 days ago"
        );
        let fix = out.fix;
        assert!(
            fix.contains("remove /var/lib/kubelet/pki/kubelet-client-current.pem"),
            "{fix}"
        );
    }

    #[test]
    fn the_serving_certificate_soon_warns_and_all_valid_passes() {
        let mut o = observation();
        let now = o.now;
        o.certificates = vec![cert("/var/lib/kubelet/pki/kubelet.crt", 10, now)];
        let out = certificates(&o, &settings());
        assert_eq!(out.status, Status::Warn);
        assert!(
            out.observed
                .contains("kubelet.crt (system:node:worker-0) expires in 10 days")
        );
        o.certificates = vec![cert("/var/lib/kubelet/pki/kubelet.crt", 200, now)];
        let out = certificates(&o, &settings());
        assert_eq!(out.status, Status::Pass, "{out:?}");
        o.certificates.clear();
        assert_eq!(certificates(&o, &settings()).status, Status::Skipped);
    }
}
