//! Cloud metadata: afterburn's `KEY=value` file, and the `${NAME}` templates identity settings
//! take their values from (`node.provider_id`, `node.name_from`).

use std::collections::BTreeMap;

/// Where afterburn writes cloud metadata: Fedora CoreOS (`AFTERBURN_*` names), then Flatcar's
/// `coreos-metadata.service`, whose `/run/metadata/coreos` (`COREOS_*` names, the file Typhoon's
/// Flatcar units read) newer releases also write as `/run/metadata/flatcar`.
pub(crate) const METADATA_FILES: [&str; 3] = [
    "/run/metadata/afterburn",
    "/run/metadata/coreos",
    "/run/metadata/flatcar",
];
/// Why a metadata template cannot be expanded.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub(crate) enum TemplateError {
    #[error("{template:?}: '$' must start a ${{NAME}} reference")]
    StrayDollar { template: String },
    #[error("{template:?}: unclosed ${{")]
    Unclosed { template: String },
    #[error("{template:?}: {name:?} is not a metadata variable (A-Z, 0-9, _)")]
    BadName { template: String, name: String },
    /// The metadata does not have this variable (yet).
    #[error("{0} is not in the metadata")]
    Missing(String),
}

/// The `${NAME}` references in a template, in order.
pub(crate) fn template_vars(template: &str) -> Result<Vec<&str>, TemplateError> {
    let mut out = Vec::new();
    let mut rest = template;
    while let Some(i) = rest.find('$') {
        let after = &rest[i + 1..];
        let Some(body) = after.strip_prefix('{') else {
            return Err(TemplateError::StrayDollar {
                template: template.into(),
            });
        };
        let Some(end) = body.find('}') else {
            return Err(TemplateError::Unclosed {
                template: template.into(),
            });
        };
        let name = &body[..end];
        if name.is_empty()
            || !name
                .bytes()
                .all(|b| b.is_ascii_uppercase() || b.is_ascii_digit() || b == b'_')
        {
            return Err(TemplateError::BadName {
                template: template.into(),
                name: name.into(),
            });
        }
        out.push(name);
        rest = &body[end + 1..];
    }
    Ok(out)
}

/// Expands `${NAME}` from `vars`; [`TemplateError::Missing`] names the first one missing.
pub(crate) fn expand(template: &str, vars: &BTreeMap<String, String>) -> Result<String, TemplateError> {
    template_vars(template)?;
    // One pass, left to right: a value is never read as a template itself (a metadata value
    // holding `${…}` stays as it is).
    let mut out = String::with_capacity(template.len());
    let mut rest = template;
    while let Some(start) = rest.find("${") {
        out.push_str(&rest[..start]);
        let after = &rest[start + 2..];
        let end = after.find('}').unwrap_or(after.len());
        let name = &after[..end];
        let value = vars
            .get(name)
            .ok_or_else(|| TemplateError::Missing(name.to_owned()))?;
        out.push_str(value);
        rest = after.get(end + 1..).unwrap_or("");
    }
    out.push_str(rest);
    Ok(out)
}
/// Parses afterburn's metadata file: `KEY=value` lines (values may be quoted).
pub fn parse_metadata(text: &str) -> BTreeMap<String, String> {
    text.lines()
        .filter_map(|l| l.split_once('='))
        .map(|(k, v)| (k.trim().to_owned(), v.trim().trim_matches('"').to_owned()))
        .filter(|(k, _)| !k.is_empty() && !k.starts_with('#'))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn metadata_templates() {
        let vars: BTreeMap<String, String> = [
            ("AFTERBURN_AWS_AVAILABILITY_ZONE", "us-east-1a"),
            ("AFTERBURN_AWS_INSTANCE_ID", "i-0abc"),
        ]
        .into_iter()
        .map(|(k, v)| (k.to_owned(), v.to_owned()))
        .collect();
        let t = "aws:///${AFTERBURN_AWS_AVAILABILITY_ZONE}/${AFTERBURN_AWS_INSTANCE_ID}";
        assert_eq!(expand(t, &vars).as_deref(), Ok("aws:///us-east-1a/i-0abc"));
        assert_eq!(
            expand("x-${MISSING}", &vars),
            Err(TemplateError::Missing("MISSING".into()))
        );
        assert_eq!(expand("plain", &vars).as_deref(), Ok("plain"));
        // A value is expanded once: one holding a template stays literal.
        let mut tricky = vars.clone();
        tricky.insert(
            "AFTERBURN_AWS_AVAILABILITY_ZONE".into(),
            "${AFTERBURN_AWS_INSTANCE_ID}".into(),
        );
        assert_eq!(
            expand(t, &tricky).as_deref(),
            Ok("aws:///${AFTERBURN_AWS_INSTANCE_ID}/i-0abc")
        );
        for bad in ["$X", "${x}", "${", "${}", "a${B"] {
            assert!(template_vars(bad).is_err(), "{bad}");
        }
    }
}
