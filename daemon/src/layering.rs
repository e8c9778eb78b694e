//! The dependency rule, checked: the core (`session`, `persistence`, `shell_env`, `exec`, `tools`,
//! `agent`, `hooks`, `skills`) never names the server, the RPC layer, the composition root or the
//! protocol crate. A test reads the core's sources, so breaking the rule fails `cargo test`.

#[cfg(test)]
mod tests {
    use std::path::{Path, PathBuf};

    const CORE: [&str; 8] = [
        "session",
        "persistence",
        "shell_env",
        "exec",
        "tools",
        "agent",
        "hooks",
        "skills.rs",
    ];
    const FORBIDDEN: [&str; 7] = [
        "crate::rpc",
        "crate::server",
        "crate::daemon",
        "crate::connection",
        "crate::access_log",
        "dsh_proto",
        "tonic::",
    ];

    fn sources(path: &Path, out: &mut Vec<PathBuf>) {
        if path.is_dir() {
            for entry in std::fs::read_dir(path).unwrap() {
                sources(&entry.unwrap().path(), out);
            }
        } else if path.extension().is_some_and(|e| e == "rs") {
            out.push(path.to_owned());
        }
    }

    #[test]
    fn the_core_never_names_the_server_rpc_or_protocol() {
        let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
        let mut files = Vec::new();
        for module in CORE {
            sources(&src.join(module), &mut files);
        }
        assert!(
            files.len() > 50,
            "the core's sources were not found: {files:?}"
        );
        let mut broken = Vec::new();
        for file in &files {
            let text = std::fs::read_to_string(file).unwrap();
            for (n, line) in text.lines().enumerate() {
                let code = line.split("//").next().unwrap_or_default();
                for name in FORBIDDEN {
                    if code.contains(name) {
                        broken.push(format!("{}:{}: {}", file.display(), n + 1, line.trim()));
                    }
                }
            }
        }
        assert!(
            broken.is_empty(),
            "the core names the edge:\n{}",
            broken.join("\n")
        );
    }
}
