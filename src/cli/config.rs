//! `nodeward config`: the effective configuration and which file set each value.

use nodeward::config;

use super::env::Env;
use super::exit::Outcome;
use super::output::{Doc, Output, write_json, write_stdout};

pub fn show(env: &Env, output: Output) -> anyhow::Result<Outcome> {
    let loaded = env.load()?;
    match output {
        Output::Human => {
            let mut text = String::new();
            for f in &loaded.files {
                text.push_str(&format!("# read {}\n", f.display()));
            }
            text.push_str(&config::render_effective(&loaded.merged));
            write_stdout(format_args!("{text}"));
        }
        Output::Json => {
            let doc = serde_json::json!({
                "files": loaded.files,
                "config": loaded.merged.table,
                "sources": loaded.merged.sources,
            });
            write_json(Doc::Config, &doc)?;
        }
    }
    Ok(Outcome::Ok)
}
