//! `dshctl models`: the models an agent can be given.

use dsh_client::Client;
use dsh_proto::v1;
use serde_json::json;

use crate::output::Output;

pub async fn run(client: &Client, out: Output) -> anyhow::Result<()> {
    let list = client
        .models()
        .list(v1::ListModelsRequest {})
        .await?
        .into_inner();
    let doc = json!({
        "models": list.models.iter().map(|m| json!({
            "provider": m.provider, "model": m.model, "default": m.is_default,
        })).collect::<Vec<_>>(),
        "source": list.source,
        "problem": list.problem,
    });
    out.emit(&doc, |w| {
        let mut table = crate::output::table(&["PROVIDER", "MODEL", "DEFAULT"]);
        for m in &list.models {
            let default = if m.is_default { "yes" } else { "" };
            table.add_row([m.provider.clone(), m.model.clone(), default.to_owned()]);
        }
        writeln!(w, "{table}")?;
        match list.source.as_str() {
            "config" => writeln!(w, "(from [model] models in the config)")?,
            "provider" => writeln!(w, "(the provider's list)")?,
            _ => writeln!(
                w,
                "(the configured model only: the provider's list could not be had: {})",
                list.problem
            )?,
        }
        Ok(())
    })
}
