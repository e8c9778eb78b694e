//! The MCP servers the end-to-end tests run: a Python server written with the official `mcp`
//! package (tests/fixtures/mcp), run by a Python that has that package, and the reference server
//! `@modelcontextprotocol/server-everything` (pinned in tests/fixtures/mcp/everything).

use std::path::PathBuf;

/// Where `.ci/run` installs the pinned `mcp` package (tests/fixtures/mcp/requirements.txt).
pub const CI_VENV: &str = "/opt/dsh-ci/mcp-python";

/// The fixture server's path.
pub fn probe_server() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("fixtures/mcp/probe_server.py")
}

/// A Python that imports the official MCP SDK: `$MCP_TEST_PYTHON`, else the venv `.ci/run`
/// makes. Fails the test, with the command that installs it, when there is none.
pub fn python() -> PathBuf {
    let python = std::env::var_os("MCP_TEST_PYTHON")
        .map_or_else(|| PathBuf::from(CI_VENV).join("bin/python"), PathBuf::from);
    let works = std::process::Command::new(&python)
        .args(["-c", "import mcp.server.mcpserver"])
        .output()
        .is_ok_and(|o| o.status.success());
    assert!(
        works,
        "the MCP tests need a Python with the official `mcp` package at {} (or MCP_TEST_PYTHON); install it with: python3 -m venv {CI_VENV} && {CI_VENV}/bin/pip install -r tests/fixtures/mcp/requirements.txt",
        python.display()
    );
    python
}

/// The reference server's command (it takes the transport as its argument: `stdio`). Fails the
/// test, with the command that installs it, when it is not installed.
pub fn everything() -> PathBuf {
    let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("fixtures/mcp/everything");
    let bin = dir.join("node_modules/.bin/mcp-server-everything");
    assert!(
        bin.exists(),
        "the MCP tests need the reference server at {}; install it with: npm ci --ignore-scripts --prefix {}",
        bin.display(),
        dir.display()
    );
    bin
}
