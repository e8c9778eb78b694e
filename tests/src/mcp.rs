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

/// The reference server over streamable HTTP on a free port of 127.0.0.1, killed when dropped.
#[derive(Debug)]
pub struct HttpEverything {
    child: std::process::Child,
    /// Its endpoint, `http://127.0.0.1:<port>/mcp`.
    pub url: String,
}

impl HttpEverything {
    /// Starts it and waits until it accepts connections.
    pub fn start() -> Self {
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .and_then(|l| l.local_addr())
            .map(|a| a.port())
            .unwrap_or_else(|e| panic!("a free port: {e}"));
        let child = std::process::Command::new(everything())
            .arg("streamableHttp")
            .env("PORT", port.to_string())
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .spawn()
            .unwrap_or_else(|e| panic!("start the reference server over HTTP: {e}"));
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
        while std::net::TcpStream::connect(("127.0.0.1", port)).is_err() {
            assert!(
                std::time::Instant::now() < deadline,
                "the reference server never listened on port {port}"
            );
            std::thread::sleep(std::time::Duration::from_millis(20));
        }
        Self {
            child,
            url: format!("http://127.0.0.1:{port}/mcp"),
        }
    }
}

impl Drop for HttpEverything {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}
