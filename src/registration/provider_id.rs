//! `--provider-id` as cloud controller managers parse it.

/// Why a provider id is not one a cloud controller manager parses.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub(crate) enum ProviderIdError {
    #[error("not <provider>://<id>")]
    NotUri,
    #[error("provider {0:?} is not a lowercase name")]
    Provider(String),
    #[error(
        "the id must be letters, digits and - . _ ~ / : only (no spaces, quotes, $, control or non-ASCII characters)"
    )]
    Characters,
    #[error("AWS's form is aws:///<availability zone>/i-<hex instance id>")]
    Aws,
    #[error("DigitalOcean's form is digitalocean://<numeric droplet id>")]
    DigitalOcean,
}

/// A provider id as cloud controller managers parse it: `<provider>://<id>` with a lowercase
/// provider name and an id of printable ASCII without spaces, quotes or shell characters; AWS's
/// `aws:///<zone>/<instance>` and DigitalOcean's `digitalocean://<droplet id>` checked part by part.
pub(crate) fn check_provider_id(id: &str) -> Result<(), ProviderIdError> {
    let (provider, rest) = id.split_once("://").ok_or(ProviderIdError::NotUri)?;
    if provider.is_empty()
        || !provider
            .bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
    {
        return Err(ProviderIdError::Provider(provider.to_owned()));
    }
    if rest.is_empty()
        || id.len() > 256
        || !rest
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b"-._~/:".contains(&b))
    {
        return Err(ProviderIdError::Characters);
    }
    let part = |s: &str, ok: fn(u8) -> bool| !s.is_empty() && s.bytes().all(ok);
    match provider {
        "aws" => match rest.strip_prefix('/').and_then(|r| r.split_once('/')) {
            Some((zone, instance))
                if part(zone, |b| {
                    b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-'
                }) && instance
                    .strip_prefix("i-")
                    .is_some_and(|h| part(h, |b| b.is_ascii_hexdigit())) =>
            {
                Ok(())
            }
            _ => Err(ProviderIdError::Aws),
        },
        "digitalocean" if !part(rest, |b| b.is_ascii_digit()) => Err(ProviderIdError::DigitalOcean),
        _ => Ok(()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_forms_cloud_controller_managers_parse() {
        for ok in [
            "aws:///us-east-1a/i-0abc123",
            "digitalocean://12345",
            "gce://project/zone/name",
            "azure:///subscriptions/x/resourceGroups/y",
        ] {
            assert_eq!(check_provider_id(ok), Ok(()), "{ok}");
        }
        for (bad, why) in [
            ("i-0abc", ProviderIdError::NotUri),
            ("AWS:///a/i-1", ProviderIdError::Provider("AWS".into())),
            ("aws:///us-east-1a/i-0a b", ProviderIdError::Characters),
            ("aws://us-east-1a/i-0abc", ProviderIdError::Aws),
            ("aws:///us-east-1a/0abc", ProviderIdError::Aws),
            ("digitalocean://droplet-1", ProviderIdError::DigitalOcean),
            ("gce://$(id)", ProviderIdError::Characters),
        ] {
            assert_eq!(check_provider_id(bad), Err(why), "{bad}");
        }
    }
}
